#include "launcher/runlog/state_writer.h"

#include "launcher/runlog/run_state.h"

#include <pthread.h>

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

void StateWriter::submit(nlohmann::json state) {
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(state);
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
    nlohmann::json state = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    Status written = write_state_file(path_, state);
    lock.lock();
    writing_ = false;
    last_ = written;
    changed_.notify_all();
  }
}

}  // namespace dtrain
