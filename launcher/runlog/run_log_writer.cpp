#include "launcher/runlog/run_log_writer.h"

#include <algorithm>
#include <utility>
#include <pthread.h>

namespace dtrain {

RunLogWriter::RunLogWriter(Limits limits, BeforeWrite before_write, DroppedReport on_dropped)
    : limits_(limits),
      before_write_(std::move(before_write)),
      on_dropped_(std::move(on_dropped)),
      thread_([this] { run(); }) {}

RunLogWriter::~RunLogWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool RunLogWriter::fits(const JobInfo& info) const {
  // One entry is always left for the drop report, so it never waits for room.
  size_t entry_cap = limits_.max_entries - 1;
  uint64_t byte_cap = limits_.max_bytes;
  switch (info.priority) {
    case Priority::kOutput:
      entry_cap = limits_.max_entries / 2;
      byte_cap = limits_.max_bytes / 2;
      break;
    case Priority::kRecord:
      entry_cap -= std::max<size_t>(1, limits_.max_entries / 16);
      byte_cap -= limits_.max_bytes / 16;
      break;
    case Priority::kEssential:
      break;
  }
  return queued_entries_ + 1 <= entry_cap && queued_bytes_ + info.bytes <= byte_cap;
}

void RunLogWriter::count_drop(const JobInfo& info) {
  if (drops_.writes == 0) drops_.first_wall_ms = info.wall_ms;
  drops_.last_wall_ms = info.wall_ms;
  ++drops_.writes;
  drops_.bytes += info.bytes;
  ++drops_.kinds[std::string(info.kind)];
  if (!report_queued_) {
    // In the place of the first drop: the report follows what was queued before it.
    report_queued_ = true;
    push({{}, 0, true});
  }
}

void RunLogWriter::push(Job job) {
  bool was_idle = jobs_.empty() && !running_job_;
  queued_bytes_ += job.bytes;
  ++queued_entries_;
  peak_entries_ = std::max(peak_entries_, queued_entries_);
  peak_bytes_ = std::max(peak_bytes_, queued_bytes_);
  jobs_.push_back(std::move(job));
  // A busy writer takes the next job without being told: a wakeup per job would cost the loop a
  // system call per event.
  if (was_idle) changed_.notify_all();
}

bool RunLogWriter::post(std::function<void()> write, const JobInfo& info) {
  std::lock_guard lock(mutex_);
  if (!fits(info)) {
    count_drop(info);
    return false;
  }
  push({std::move(write), info.bytes, false});
  return true;
}

void RunLogWriter::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
}

size_t RunLogWriter::queued() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

size_t RunLogWriter::peak_queued() const {
  std::lock_guard lock(mutex_);
  return peak_entries_;
}

uint64_t RunLogWriter::peak_queued_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_bytes_;
}

void RunLogWriter::run() {
  ::pthread_setname_np(::pthread_self(), "dtrain-runlog");  // top -H, perf and gdb name it
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
    if (jobs_.empty()) return;  // stopping, nothing left to write
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    if (before_write_) before_write_();
    if (job.drop_report) {
      // Taken once the file system writes again, so a stall's drops make one report; drops
      // from here on start the next one, behind what is queued now.
      lock.lock();
      DropSummary dropped = std::exchange(drops_, DropSummary{});
      report_queued_ = false;
      lock.unlock();
      if (on_dropped_) on_dropped_(dropped);
    } else if (job.write) {
      job.write();
    }
    lock.lock();
    queued_bytes_ -= job.bytes;
    --queued_entries_;
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace dtrain
