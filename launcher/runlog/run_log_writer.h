#pragma once
// RunLogWriter: the run directory's writes, off the supervisor's event loop. events.jsonl,
// ranks/<r>.log, metrics.jsonl, plans, samples and host facts live under $DTRAIN_HOME, often
// NFS: one stalled write(2) on the loop would delay the pings that keep every agent from
// fencing, and a stall as long as heartbeat.timeout would take the whole job down. The loop
// queues each write as a job; one thread runs them in order (events stay in order, a rank's log
// stays whole). Memory is bounded: past `max_queued_bytes` of queued rank output, new output is
// dropped and counted (the next job that runs reports the count through `on_dropped`); events,
// plans and other small records are never dropped.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtrain {

class RunLogWriter {
 public:
  /// Test seam: runs on the writer thread before every job (a test stalls the "file system" in
  /// it). Must return eventually.
  using BeforeWrite = std::function<void()>;
  /// Hears, on the writer thread, how many bytes of droppable output were dropped since the last
  /// report.
  using DroppedReport = std::function<void(uint64_t bytes, uint64_t writes)>;

  explicit RunLogWriter(uint64_t max_queued_bytes = 64ull << 20, BeforeWrite before_write = {},
                        DroppedReport on_dropped = {});
  ~RunLogWriter();  ///< runs what is queued, then stops
  RunLogWriter(const RunLogWriter&) = delete;
  RunLogWriter& operator=(const RunLogWriter&) = delete;

  /// Queues `write`; never blocks on I/O. `bytes` is its size for the bound.
  void post(std::function<void()> write, uint64_t bytes = 0);
  /// Like post, but dropped (and counted) while the queue holds more than the bound.
  void post_droppable(std::function<void()> write, uint64_t bytes);
  /// Waits until every job queued so far has run.
  void flush();

  /// Jobs queued and not yet run (for tests and the loop's own diagnostics).
  size_t queued() const;

 private:
  struct Job {
    std::function<void()> write;
    uint64_t bytes;
  };
  void run();

  uint64_t max_queued_bytes_;
  BeforeWrite before_write_;
  DroppedReport on_dropped_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  uint64_t queued_bytes_ = 0;
  uint64_t dropped_bytes_ = 0;
  uint64_t dropped_writes_ = 0;
  bool running_job_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dtrain
