// `dtrain logs RUN [--rank N] [--host H] [--tail N] [--follow]`: the ranks' output from
// ranks/<rank>.log. Every line is printed as "[rank N] <line>", also with --rank, so that the
// format does not change with the filter and scripts can rely on one shape. Without --follow
// the ranks come in blocks, lowest rank first; with --follow new lines are printed as they
// arrive (polling every 200 ms) until the run ends or its supervisor is gone.
// A rank log rotated at logs.max_bytes continues in <rank>.log.1: output and tails read across
// the two files (and --follow moves on to the new file), and when <rank>.log.1 itself begins
// with a rotation marker, stderr says that older output was rotated away.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/strings.h"
#include "launcher/runlog/line_follower.h"
#include "launcher/runlog/rank_logs.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"

namespace dtrain::cli {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(200);

struct LogsOptions {
  std::string run;
  std::optional<int> rank;
  std::string host;
  bool follow = false;
  std::optional<size_t> tail;
};


void print_line(int rank, const std::string& line) {
  std::printf("[rank %d] %s\n", rank, line.c_str());
}

/// The ranks state.json places on `host`, or all its ranks when `host` is empty.
std::set<int> ranks_in_state(const RunSnapshot& state, const std::string& host) {
  std::set<int> ranks;
  for (const RunSnapshot::Rank& rank : state.ranks) {
    if (host.empty() || rank.host == host) ranks.insert(rank.rank);
  }
  return ranks;
}

std::vector<std::string> host_names(const RunSnapshot& state) {
  std::set<std::string> names;
  for (const RunSnapshot::Host& host : state.hosts) names.insert(host.name);
  for (const RunSnapshot::Rank& rank : state.ranks) names.insert(rank.host);
  names.erase("");
  return {names.begin(), names.end()};
}

/// The ranks to show now. Errors when a filter names something the run does not have.
Result<std::set<int>> select_ranks(const RunDirectory& run, const Result<RunSnapshot>& state,
                                   const LogsOptions& options) {
  std::vector<int> with_logs = run.ranks_with_logs();
  std::set<int> known(with_logs.begin(), with_logs.end());
  if (state) {
    std::set<int> from_state = ranks_in_state(*state, "");
    known.insert(from_state.begin(), from_state.end());
  }
  if (options.rank) {
    if (!known.count(*options.rank)) {
      std::string have = known.empty() ? "none yet"
                                       : std::to_string(*known.begin()) + "-" + std::to_string(*known.rbegin());
      return Error::user("run " + run.id() + " has no rank " + std::to_string(*options.rank) +
                         " (ranks: " + have + ")");
    }
    return std::set<int>{*options.rank};
  }
  if (!options.host.empty()) {
    if (!state) return Error::infra("--host needs the run's state: " + state.error().message);
    std::set<int> on_host = ranks_in_state(*state, options.host);
    if (on_host.empty()) {
      std::vector<std::string> hosts = host_names(*state);
      std::string message = "run " + run.id() + " has no ranks on host '" + options.host + "'";
      if (std::string near = closest_match(options.host, hosts); !near.empty()) {
        message += "; did you mean '" + near + "'?";
      } else {
        message += " (hosts: " + (hosts.empty() ? std::string("none yet") : join(hosts, ", ")) + ")";
      }
      return Error::user(message);
    }
    return on_host;
  }
  return known;
}

/// Printed when the oldest kept file of a rank begins with a rotation marker.
void say_rotated_away(int rank, const std::string& oldest) {
  std::fprintf(stderr, "dtrain logs: rank %d: older output was rotated away (logs.max_bytes); shown from %s\n", rank,
               oldest.c_str());
}

/// Prints the lines of `follower`'s file until its end; the unterminated last one too when
/// `with_partial`. `oldest`: the file is the oldest kept, so a rotation marker first is said.
Status print_to_end(int rank, LineFollower& follower, bool with_partial, bool oldest) {
  for (bool first = true;; first = false) {
    Result<std::vector<std::string>> lines = follower.poll();
    if (!lines) return lines.error();
    if (lines->empty()) break;
    if (first && oldest && is_rotation_marker(lines->front())) say_rotated_away(rank, follower.path());
    for (const std::string& line : *lines) print_line(rank, line);
  }
  if (with_partial) {
    if (std::string rest = follower.take_partial(); !rest.empty()) print_line(rank, rest);
  }
  return {};
}

/// The last `count` lines of <rank>.log.1, printed before the current file's when that has fewer.
Status print_rotated_tail(int rank, const std::string& path, size_t count) {
  std::string old = rotated_rank_log_path(path);
  Result<FileTail> end = read_tail_lines(old, count);
  if (!end) return end.error();
  std::vector<std::string> lines = std::move(end->lines);
  // The rotation may have cut a line: its start ends this file (the rest follows the marker).
  if (!end->partial.empty()) lines.push_back(std::move(end->partial));
  if (lines.size() > count) lines.erase(lines.begin());
  bool whole_file = lines.size() < count;
  if (whole_file && !lines.empty() && is_rotation_marker(lines.front())) say_rotated_away(rank, old);
  for (const std::string& line : lines) print_line(rank, line);
  return {};
}

/// Prints a rank's existing log (its last `tail` lines if given), across a rotation, and
/// returns a follower placed after it. `with_partial`: also print an unterminated final line
/// (the writer is done).
Result<LineFollower> print_existing(const RunDirectory& run, int rank, std::optional<size_t> tail, bool with_partial) {
  std::string path = run.rank_log_path(rank);
  if (tail) {
    Result<FileTail> end = read_tail_lines(path, *tail);
    if (!end) return end.error();
    // A final unterminated line counts as one of the last N when it is printed.
    bool show_partial = with_partial && !end->partial.empty() && *tail > 0;
    size_t skip = show_partial && end->lines.size() == *tail ? 1 : 0;
    size_t shown = end->lines.size() - skip + (show_partial ? 1 : 0);
    if (shown < *tail) {
      if (Status earlier = print_rotated_tail(rank, path, *tail - shown); !earlier) return earlier.error();
    }
    for (size_t i = skip; i < end->lines.size(); ++i) print_line(rank, end->lines[i]);
    if (show_partial) print_line(rank, end->partial);
    return LineFollower(path, end->complete_end);
  }
  LineFollower earlier(rotated_rank_log_path(path));
  if (Status printed = print_to_end(rank, earlier, /*with_partial=*/true, /*oldest=*/true); !printed) {
    return printed.error();
  }
  LineFollower follower(path);
  bool oldest = earlier.offset() == 0;  // no .1: this file is the oldest kept
  if (Status printed = print_to_end(rank, follower, with_partial, oldest); !printed) return printed.error();
  return follower;
}

int show_once(const RunDirectory& run, const std::set<int>& ranks, const LogsOptions& options) {
  if (run.ranks_with_logs().empty()) {
    std::fprintf(stderr, "dtrain logs: run %s has no rank logs yet (%s)\n", run.id().c_str(), run.ranks_dir().c_str());
    return 0;
  }
  for (int rank : ranks) {
    Result<LineFollower> printed = print_existing(run, rank, options.tail, /*with_partial=*/true);
    if (!printed) {
      std::fprintf(stderr, "dtrain logs: %s\n", printed.error().message.c_str());
      return exit_code_for(printed.error());
    }
  }
  return 0;
}

int follow(const RunDirectory& run, std::set<int> ranks, const LogsOptions& options) {
  std::map<int, LineFollower> followers;
  for (int rank : ranks) {
    Result<LineFollower> printed = print_existing(run, rank, options.tail, /*with_partial=*/false);
    if (!printed) {
      std::fprintf(stderr, "dtrain logs: %s\n", printed.error().message.c_str());
      return exit_code_for(printed.error());
    }
    followers.emplace(rank, std::move(*printed));
  }
  std::fflush(stdout);
  for (;;) {
    // Read the state before draining: whatever was written before it turned terminal is then
    // already in the files this round reads.
    Result<RunSnapshot> state = read_state(run);
    bool alive = state && supervisor_alive(*state);
    bool done = state && (is_terminal_state(state->state) || !alive);
    // Ranks appear as they start (and move between hosts across generations).
    if (!options.rank) {
      Result<std::set<int>> now = select_ranks(run, state, options);
      if (now) {
        for (int rank : *now) {
          if (!followers.count(rank)) followers.emplace(rank, LineFollower(run.rank_log_path(rank)));
        }
      }
    }
    for (auto& [rank, follower] : followers) {
      for (bool rotated = false;;) {
        Result<std::vector<std::string>> lines = follower.poll();
        if (!lines) {
          std::fprintf(stderr, "dtrain logs: %s\n", lines.error().message.c_str());
          return exit_code_for(lines.error());
        }
        for (const std::string& line : *lines) print_line(rank, line);
        if (!lines->empty()) continue;
        if (rotated) {
          // The renamed file is final and read to its end: its cut line, then the new file.
          if (std::string rest = follower.take_partial(); !rest.empty()) print_line(rank, rest);
          follower = LineFollower(follower.path());
          rotated = false;
        } else if (follower.replaced()) {
          rotated = true;  // one more read: what reached the old file before the rename
        } else {
          break;
        }
      }
      if (done) {
        if (std::string rest = follower.take_partial(); !rest.empty()) print_line(rank, rest);
      }
    }
    std::fflush(stdout);
    if (done) {
      std::string shown = display_state(*state, alive);
      std::fprintf(stderr, "dtrain logs: run %s %s\n", run.id().c_str(),
                   shown == "supervisor gone" ? "lost its supervisor (it no longer runs); stopped following"
                                              : ("ended (state " + shown + ")").c_str());
      return 0;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

int run_logs(const LogsOptions& options) {
  Result<RunDirectory> run = RunDirectory::open(options.run);
  if (!run) {
    std::fprintf(stderr, "dtrain logs: %s\n", run.error().message.c_str());
    return exit_code_for(run.error());
  }
  Result<RunSnapshot> state = read_state(*run);
  Result<std::set<int>> ranks = select_ranks(*run, state, options);
  if (!ranks) {
    std::fprintf(stderr, "dtrain logs: %s\n", ranks.error().message.c_str());
    return exit_code_for(ranks.error());
  }
  return options.follow ? follow(*run, *ranks, options) : show_once(*run, *ranks, options);
}

}  // namespace

void add_logs_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<LogsOptions>();
  CLI::App* command = app.add_subcommand(
      "logs", "Print the ranks' output; every line is prefixed \"[rank N] \" (also with --rank)");
  command->add_option("run", options->run, "Run id or a unique prefix of one")->required();
  command->add_option("--rank", options->rank, "Only this rank")->check(CLI::NonNegativeNumber);
  command->add_option("--host", options->host, "Only the ranks placed on this host (per state.json)");
  command->add_option("--tail", options->tail, "Only the last N lines of each rank");
  command->add_flag("-f,--follow", options->follow,
                    "Keep printing new lines until the run ends (or its supervisor is gone)");
  command->callback([options, &context] { context.exit_code = run_logs(*options); });
}

}  // namespace dtrain::cli
