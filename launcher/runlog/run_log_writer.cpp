#include "launcher/runlog/run_log_writer.h"

#include <pthread.h>

namespace dtrain {

RunLogWriter::RunLogWriter(uint64_t max_queued_bytes, BeforeWrite before_write, DroppedReport on_dropped)
    : max_queued_bytes_(max_queued_bytes),
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

void RunLogWriter::post(std::function<void()> write, uint64_t bytes) {
  bool was_idle;
  {
    std::lock_guard lock(mutex_);
    was_idle = jobs_.empty() && !running_job_;
    jobs_.push_back({std::move(write), bytes});
    queued_bytes_ += bytes;
  }
  // A busy writer takes the next job without being told: a wakeup per job would cost the loop a
  // system call per event.
  if (was_idle) changed_.notify_all();
}

void RunLogWriter::post_droppable(std::function<void()> write, uint64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (queued_bytes_ + bytes > max_queued_bytes_) {
      dropped_bytes_ += bytes;
      ++dropped_writes_;
      return;
    }
    jobs_.push_back({std::move(write), bytes});
    queued_bytes_ += bytes;
  }
  changed_.notify_all();
}

void RunLogWriter::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
}

size_t RunLogWriter::queued() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

void RunLogWriter::run() {
  ::pthread_setname_np(::pthread_self(), "dtrain-runlog");  // top -H, perf and gdb name it
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return !jobs_.empty() || dropped_writes_ > 0 || stopping_; });
    if (jobs_.empty() && dropped_writes_ == 0) return;  // stopping, nothing left to write
    Job job{{}, 0};
    if (!jobs_.empty()) {
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    running_job_ = true;
    uint64_t dropped_bytes = dropped_bytes_, dropped_writes = dropped_writes_;
    dropped_bytes_ = dropped_writes_ = 0;
    lock.unlock();
    if (before_write_) before_write_();
    // Reported in order: after what was queued before the drops, before what came after.
    if (dropped_writes > 0 && on_dropped_) on_dropped_(dropped_bytes, dropped_writes);
    if (job.write) job.write();
    lock.lock();
    queued_bytes_ -= job.bytes;
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace dtrain
