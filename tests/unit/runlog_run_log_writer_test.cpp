// RunLogWriter under a stalled file system: the seam (BeforeWrite) holds the writer thread as a
// hung NFS write would; the loop's side (post) goes on. The queue stays within its bounds,
// output goes first, essential records are kept, and everything dropped is counted in ONE
// runlog.dropped report that lands where the first drop happened.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/events/events.h"
#include "launcher/run/run_recorder.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_log_writer.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using Priority = RunLogWriter::Priority;

namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

/// A file system that hangs on demand: while stalled, the writer thread waits in before_write
/// (at most kDeadline, so a broken test fails instead of hanging; `timed_out` tells).
class StallableSink {
 public:
  void stall() {
    std::lock_guard lock(mutex_);
    stalled_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      stalled_ = false;
    }
    changed_.notify_all();
  }
  /// Until the writer thread is held in the stall; false after kDeadline.
  bool wait_until_held() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kDeadline, [this] { return held_; });
  }
  void before_write() {
    std::unique_lock lock(mutex_);
    if (!stalled_) return;
    held_ = true;
    changed_.notify_all();
    if (!changed_.wait_for(lock, kDeadline, [this] { return !stalled_; })) timed_out = true;
    held_ = false;
  }
  /// A writer whose jobs pass through this stall and whose drop reports land in `written` (as
  /// "runlog.dropped") and `reports`.
  std::unique_ptr<RunLogWriter> writer(RunLogWriter::Limits limits) {
    return std::make_unique<RunLogWriter>(
        limits, [this] { before_write(); },
        [this](const RunLogWriter::DropSummary& dropped) {
          reports.push_back(dropped);
          written.push_back("runlog.dropped");
        });
  }
  /// What reached "the disk", in order (written on the writer thread; read after flush()).
  std::vector<std::string> written;
  std::vector<RunLogWriter::DropSummary> reports;
  std::atomic<bool> timed_out{false};

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stalled_ = false;
  bool held_ = false;
};

struct Posted {
  std::vector<std::string> kept;  ///< in posting order
  uint64_t dropped = 0;
  uint64_t dropped_bytes = 0;
};

/// Posts `count` jobs named `<kind>-<i>` of `bytes` each; wall_ms counts up from `*wall`.
Posted post_many(RunLogWriter& writer, StallableSink& sink, Priority priority, const std::string& kind, int count,
                 uint64_t bytes, int64_t* wall) {
  Posted posted;
  for (int i = 0; i < count; ++i) {
    std::string name = kind + "-" + std::to_string(i);
    if (writer.post([&sink, name] { sink.written.push_back(name); }, {priority, kind, bytes, (*wall)++})) {
      posted.kept.push_back(name);
    } else {
      ++posted.dropped;
      posted.dropped_bytes += bytes;
    }
  }
  return posted;
}

/// `written` without the report markers, and the index of each report marker.
std::vector<std::string> without_reports(const std::vector<std::string>& written, std::vector<size_t>* report_at) {
  std::vector<std::string> out;
  for (size_t i = 0; i < written.size(); ++i) {
    if (written[i] == "runlog.dropped") {
      report_at->push_back(i);
    } else {
      out.push_back(written[i]);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a stalled file system: the queue stays bounded, output goes first, one report counts every drop") {
  StallableSink sink;
  const RunLogWriter::Limits limits{1 << 20, 64};
  int64_t wall = 1'000;
  std::vector<std::string> expected;  // every kept job, in posting order
  Posted output, records, essential;
  {
    std::unique_ptr<RunLogWriter> owned = sink.writer(limits);
    RunLogWriter& writer = *owned;
    sink.stall();
    REQUIRE(writer.post([&sink] { sink.written.push_back("first"); }, {Priority::kRecord, "first", 10, wall++}));
    REQUIRE(sink.wait_until_held());  // the writer is now stuck in "first"'s write

    // Far more than fits, in the order a busy run makes them: rank output, then ordinary events,
    // then the records status and resume need.
    output = post_many(writer, sink, Priority::kOutput, "rank_output", 500, 100, &wall);
    records = post_many(writer, sink, Priority::kRecord, "worker.started", 500, 200, &wall);
    essential = post_many(writer, sink, Priority::kEssential, "run.finished", 3, 300, &wall);

    // Bounded while stalled: never more jobs (the running one and the report included) or bytes.
    CHECK(writer.peak_queued() <= limits.max_entries);
    CHECK(writer.peak_queued_bytes() <= limits.max_bytes);
    // Output may use only half of the queue; ordinary records more; essential ones all got in.
    CHECK(output.kept.size() < limits.max_entries / 2);
    CHECK(output.dropped > 0);
    CHECK(!records.kept.empty());
    CHECK(records.dropped > 0);
    CHECK(essential.kept.size() == 3);
    sink.release();
    writer.flush();
    CHECK_FALSE(sink.timed_out.load());
  }
  expected.push_back("first");
  expected.insert(expected.end(), output.kept.begin(), output.kept.end());
  expected.insert(expected.end(), records.kept.begin(), records.kept.end());
  expected.insert(expected.end(), essential.kept.begin(), essential.kept.end());

  // Every kept write reached the sink once, in order; exactly one report, right after the last
  // output that fitted (where the first drop happened).
  std::vector<size_t> report_at;
  CHECK(without_reports(sink.written, &report_at) == expected);
  REQUIRE(report_at.size() == 1);
  CHECK(report_at[0] == 1 + output.kept.size());
  REQUIRE(sink.reports.size() == 1);
  const RunLogWriter::DropSummary& report = sink.reports[0];
  CHECK(report.writes == output.dropped + records.dropped);
  CHECK(report.bytes == output.dropped_bytes + records.dropped_bytes);
  CHECK(report.kinds == std::map<std::string, uint64_t>{{"rank_output", output.dropped}, {"worker.started", records.dropped}});
  // The first dropped output was made right after the last kept one; the last drop was the last record.
  CHECK(report.first_wall_ms == 1'000 + 1 + static_cast<int64_t>(output.kept.size()));
  CHECK(report.last_wall_ms == 1'000 + 1 + 500 + 500 - 1);
}

TEST_CASE("the byte bound: a few large outputs fill it before the entry bound, and a later stall reports again") {
  StallableSink sink;
  const RunLogWriter::Limits limits{1 << 20, 65'536};
  int64_t wall = 0;
  Posted first_stall, second_stall;
  {
    std::unique_ptr<RunLogWriter> owned = sink.writer(limits);
    RunLogWriter& writer = *owned;
    sink.stall();
    REQUIRE(writer.post([&sink] { sink.written.push_back("first"); }, {Priority::kRecord, "first", 0, wall++}));
    REQUIRE(sink.wait_until_held());
    first_stall = post_many(writer, sink, Priority::kOutput, "chunk", 20, 100 << 10, &wall);
    // 100 KiB chunks into half of 1 MiB: five fit.
    CHECK(first_stall.kept.size() == 5);
    CHECK(writer.peak_queued_bytes() <= limits.max_bytes / 2);
    sink.release();
    writer.flush();

    // The queue drained: output fits again, and drops of a new stall make a second report.
    sink.stall();
    REQUIRE(writer.post([&sink] { sink.written.push_back("second"); }, {Priority::kRecord, "second", 0, wall++}));
    REQUIRE(sink.wait_until_held());
    second_stall = post_many(writer, sink, Priority::kOutput, "again", 20, 100 << 10, &wall);
    CHECK(second_stall.kept.size() == 5);
    sink.release();
    writer.flush();
    CHECK_FALSE(sink.timed_out.load());
  }
  REQUIRE(sink.reports.size() == 2);
  CHECK(sink.reports[0].writes == 15);
  CHECK(sink.reports[0].bytes == 15 * (100 << 10));
  CHECK(sink.reports[1].writes == 15);
  CHECK(sink.reports[1].kinds == std::map<std::string, uint64_t>{{"again", 15}});
}

TEST_CASE("nothing dropped, nothing reported, and the destructor writes what is queued") {
  StallableSink sink;
  int64_t wall = 0;
  Posted posted;
  {
    RunLogWriter writer({}, {}, [&sink](const RunLogWriter::DropSummary& dropped) { sink.reports.push_back(dropped); });
    posted = post_many(writer, sink, Priority::kOutput, "line", 1000, 80, &wall);
  }
  CHECK(posted.dropped == 0);
  CHECK(sink.written == posted.kept);
  CHECK(sink.reports.empty());
}

// ---- the same through RunRecorder, into a real run directory

namespace {

/// DTRAIN_HOME in a temporary directory for one test.
struct TemporaryHome {
  testing::TempDir dir;
  TemporaryHome() { ::setenv("DTRAIN_HOME", (dir.path + "/home").c_str(), 1); }
  ~TemporaryHome() { ::unsetenv("DTRAIN_HOME"); }
};

std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> lines;
  Result<std::string> text = read_file(path);
  REQUIRE(text);
  size_t start = 0;
  for (size_t end; (end = text->find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text->substr(start, end - start));
  }
  return lines;
}

}  // namespace

TEST_CASE("RunRecorder over a stalled run directory: one runlog.dropped in events.jsonl, run.finished kept, the log whole up to the drop") {
  TemporaryHome home;
  SystemClock clock;
  Result<RunDirectory> run = RunDirectory::create("train-20261202-180000-beef");
  REQUIRE(run);
  Result<EventLog> log = EventLog::create(run->events_path(), run->id(), clock.wall_ms());
  REQUIRE(log);
  StallableSink sink;
  constexpr int kLines = 40'000;  // more than half of the 65,536 entries that output may use
  {
    run::RunRecorder recorder(*run, std::move(*log), run::Console(run::Console::Mode::quiet, stderr), clock,
                              [&sink] { sink.before_write(); });
    REQUIRE(recorder.open().ok());
    sink.stall();
    recorder.record(events::RunState{"running", "the stall begins"}.to_json());
    REQUIRE(sink.wait_until_held());
    for (int i = 0; i < kLines; ++i) recorder.rank_output(0, 0, "stdout", "line " + std::to_string(i));
    recorder.record(events::RunFinished{"succeeded", 0, 0, 1, 1000}.to_json());
    sink.release();
    recorder.flush();
  }
  CHECK_FALSE(sink.timed_out.load());

  // ranks/0.log: the generation marker, then lines 0..kept-1, none missing inside.
  std::vector<std::string> ranks = file_lines(run->rank_log_path(0));
  REQUIRE(ranks.size() > 1);
  const size_t kept = ranks.size() - 1;
  for (size_t i = 0; i < kept; ++i) REQUIRE(ranks[i + 1] == "line " + std::to_string(i));
  CHECK(kept < static_cast<size_t>(kLines));

  std::vector<nlohmann::json> events;
  for (const std::string& line : file_lines(run->events_path())) {
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object() && event.contains("ev")) events.push_back(event);
  }
  std::vector<std::string> names;
  for (const nlohmann::json& event : events) names.push_back(event["ev"]);
  CHECK(names == std::vector<std::string>{"run.state", "runlog.dropped", "run.finished"});
  REQUIRE(events.size() == 3);
  const nlohmann::json& dropped = events[1];
  CHECK(catalogue_problem(dropped).empty());
  CHECK(dropped["writes"] == kLines - kept);
  CHECK(dropped["kinds"] == nlohmann::json{{"rank_output", kLines - kept}});
  CHECK(dropped["detail"].get<std::string>().find(std::to_string(kLines - kept) + " writes") != std::string::npos);
  CHECK(parse_timestamp_utc(dropped["first_ts"].get<std::string>()).has_value());
  CHECK(parse_timestamp_utc(dropped["last_ts"].get<std::string>()).has_value());
}
