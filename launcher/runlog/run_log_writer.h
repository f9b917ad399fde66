#pragma once
// RunLogWriter: the run directory's writes, off the supervisor's event loop. events.jsonl,
// ranks/<r>.log, metrics.jsonl, plans, samples and host facts live under $DTRAIN_HOME, often
// NFS: one stalled write(2) on the loop would delay the pings that keep every agent from
// fencing, and a stall as long as heartbeat.timeout would take the whole job down. The loop
// queues each write as a job; one thread runs them in order (events stay in order, a rank's log
// stays whole).
//
// Memory is bounded, in entries and in bytes, however long the file system stalls: a job that
// does not fit is dropped at once (post never waits for the disk) and counted. What is dropped
// first is what matters least: rank output and metrics may fill only half of the queue,
// ordinary records all but a reserve, and the reserve is kept for essential records (the run's
// state and end, failures and their root cause, recoveries, checkpoints, plans: what `dtrain
// status`, `resume` and `report` read). The first drop of a stall queues one report in the
// drop's place; when the writer reaches it (the file system writes again) it hands the count,
// bytes, kinds and first/last times of everything dropped since to `on_dropped`, which writes
// ONE runlog.dropped event. Nothing is dropped without being counted there.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace dtrain {

/// The run-log queue's bounds (RunLogWriter); tests make them small.
struct RunLogLimits {
  /// 64 MiB: minutes of rank output of a large job at ordinary rates, and small next to a login
  /// node's memory (the supervisor's own footprint is tens of MiB).
  static constexpr uint64_t kMaxQueuedBytes = 64ull << 20;
  /// 65,536 jobs: a restart storm at thousands of hosts (a few events per rank) fits, while
  /// millions of tiny jobs (whose bytes alone would not hit the byte bound) cannot pile up; a
  /// queued job costs about 200 bytes beyond its payload.
  static constexpr size_t kMaxQueuedEntries = 65'536;

  uint64_t max_bytes = kMaxQueuedBytes;
  size_t max_entries = kMaxQueuedEntries;
};

class RunLogWriter {
 public:
  using Limits = RunLogLimits;

  /// What a job is worth when the queue is full.
  enum class Priority {
    kOutput,     ///< rank output, metrics lines and files: up to half of either bound
    kRecord,     ///< ordinary events and files: up to the bounds less a 1/16 reserve
    kEssential,  ///< up to the bounds (one entry is always left for the drop report)
  };

  /// How a job counts against the bounds, and how it is named if dropped.
  struct JobInfo {
    Priority priority = Priority::kRecord;
    std::string_view kind;  ///< "rank_output", an event name, ...: copied only when dropped
    uint64_t bytes = 0;     ///< its payload's size
    int64_t wall_ms = 0;    ///< when it was posted (the drop report's first/last)
  };

  /// Everything dropped since the last report.
  struct DropSummary {
    uint64_t writes = 0;
    uint64_t bytes = 0;
    std::map<std::string, uint64_t> kinds;  ///< how many of each kind
    int64_t first_wall_ms = 0;
    int64_t last_wall_ms = 0;
  };

  /// Test seam: runs on the writer thread before every job (a test stalls the "file system" in
  /// it). Must return eventually.
  using BeforeWrite = std::function<void()>;
  /// Hears, on the writer thread and in the queue's order, what was dropped (writes > 0).
  using DroppedReport = std::function<void(const DropSummary&)>;

  explicit RunLogWriter(Limits limits = Limits(), BeforeWrite before_write = {}, DroppedReport on_dropped = {});
  ~RunLogWriter();  ///< runs what is queued, then stops
  RunLogWriter(const RunLogWriter&) = delete;
  RunLogWriter& operator=(const RunLogWriter&) = delete;

  /// Queues `write`, or drops and counts it when `info` does not fit its priority's share of the
  /// bounds; never blocks on I/O. True when queued.
  bool post(std::function<void()> write, const JobInfo& info);
  /// Waits until every job queued so far has run.
  void flush();

  /// Jobs waiting to run (not the one running).
  size_t queued() const;
  /// The most jobs / bytes ever held at once, the running one included (tests check the bounds).
  size_t peak_queued() const;
  uint64_t peak_queued_bytes() const;

 private:
  struct Job {
    std::function<void()> write;
    uint64_t bytes = 0;
    bool drop_report = false;  ///< hands drops_ to on_dropped_ instead of running `write`
  };
  bool fits(const JobInfo& info) const;  ///< mutex_ held
  void count_drop(const JobInfo& info);  ///< mutex_ held
  void push(Job job);                    ///< mutex_ held
  void run();

  Limits limits_;
  BeforeWrite before_write_;
  DroppedReport on_dropped_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  size_t queued_entries_ = 0;  ///< jobs_ plus the one running
  uint64_t queued_bytes_ = 0;
  size_t peak_entries_ = 0;
  uint64_t peak_bytes_ = 0;
  DropSummary drops_;
  bool report_queued_ = false;
  bool running_job_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dtrain
