#include "launcher/runlog/state_writer.h"

#include <pthread.h>

#include <chrono>

#include "launcher/base/fd.h"

namespace dtrain {

StateWriter::StateWriter(std::string state_path) : path_(std::move(state_path)), thread_([this] { run(); }) {}

StateWriter::~StateWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StateWriter::submit(RunSnapshot snapshot) {
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(snapshot);
  }
  changed_.notify_all();
}

Status StateWriter::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  return last_;
}

void StateWriter::run() {
  ::pthread_setname_np(::pthread_self(), "dtrain-state");  // top -H, perf and gdb name it
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return pending_ || stopping_; });
    if (!pending_) return;  // stopping, nothing left to write
    RunSnapshot snapshot = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    // Only the serialising is timed: it is CPU, which the caller paces. The write and its
    // fsyncs are waiting, and a slow disk must not make state.json go stale (at 50x a 200 ms
    // fsync, status and drills would see the run 10 s late).
    auto started = std::chrono::steady_clock::now();
    std::string text = snapshot.text();
    last_text_ms_ =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    Status written = write_file_atomic(path_, text);
    lock.lock();
    writing_ = false;
    last_ = written;
    changed_.notify_all();
  }
}

}  // namespace dtrain
