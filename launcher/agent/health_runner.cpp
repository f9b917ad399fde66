#include "launcher/agent/health_runner.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "launcher/agent/process_tree.h"
#include "launcher/base/fd.h"

namespace dtrain::agent {

struct HealthRunner::Shared {
  std::mutex mutex;
  std::condition_variable wake;       // a job queued, or stop
  std::condition_variable finished;   // the thread returned
  std::deque<HealthJob> jobs;
  std::vector<proto::HealthReply> replies;
  std::vector<pid_t> workers;         // the running job's
  bool stopping = false;
  bool thread_done = false;
  UniqueFd ready{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
  UniqueFd stop{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
};

namespace {

void signal_fd(int fd) {
  uint64_t one = 1;
  ssize_t written = ::write(fd, &one, sizeof one);
  (void)written;  // a full counter is still readable, which is all it says
}

/// This run's processes: the agent, its workers and everything below them.
std::set<int64_t> own_processes(const std::vector<pid_t>& workers) {
  std::set<int64_t> own{static_cast<int64_t>(::getpid())};
  if (workers.empty()) return own;
  std::vector<ProcessEntry> snapshot = scan_processes();
  for (pid_t worker : workers) {
    own.insert(worker);
    for (const ProcessEntry& entry : descendants_of(worker, snapshot)) own.insert(entry.pid);
  }
  return own;
}

void run_jobs(std::shared_ptr<HealthRunner::Shared> shared, proto::HealthRequest request, HealthEnvironment environment) {
  ::pthread_setname_np(::pthread_self(), "dtrain-health");
  environment.stop_fd = shared->stop.get();
  environment.own_pids = [shared] {
    std::vector<pid_t> workers;
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      workers = shared->workers;
    }
    return own_processes(workers);
  };
  // A wait for leftover memory to be freed ends at once when the agent stops.
  environment.pause = [shared](int64_t ms) {
    std::unique_lock<std::mutex> lock(shared->mutex);
    return !shared->wake.wait_for(lock, std::chrono::milliseconds(ms), [&] { return shared->stopping; });
  };
  HostHealthChecker checker(std::move(environment));
  std::unique_lock<std::mutex> lock(shared->mutex);
  for (;;) {
    shared->wake.wait(lock, [&] { return shared->stopping || !shared->jobs.empty(); });
    if (shared->stopping) break;
    HealthJob job = std::move(shared->jobs.front());
    shared->jobs.pop_front();
    shared->workers = job.workers;
    lock.unlock();
    proto::HealthReport report = checker.run(request, job.moment, job.diagnose, job.xids);
    lock.lock();
    shared->replies.push_back({job.id, std::move(report)});
    signal_fd(shared->ready.get());
  }
  shared->thread_done = true;
  shared->finished.notify_all();
}

}  // namespace

HealthRunner::HealthRunner(proto::HealthRequest request, HealthEnvironment environment)
    : shared_(std::make_shared<Shared>()) {
  thread_ = std::thread(run_jobs, shared_, std::move(request), std::move(environment));
}

HealthRunner::~HealthRunner() {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->stopping = true;
  signal_fd(shared_->stop.get());
  shared_->wake.notify_all();
  bool returned = shared_->finished.wait_for(lock, std::chrono::milliseconds(kStopWaitMs),
                                             [&] { return shared_->thread_done; });
  lock.unlock();
  if (returned) thread_.join();
  else thread_.detach();  // it holds shared_ and its checker; the process exit ends it
}

void HealthRunner::queue(HealthJob job) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->jobs.push_back(std::move(job));
  }
  shared_->wake.notify_all();
}

int HealthRunner::ready_fd() const { return shared_->ready.get(); }

std::vector<proto::HealthReply> HealthRunner::take_replies() {
  uint64_t count = 0;
  ssize_t drained = ::read(shared_->ready.get(), &count, sizeof count);
  (void)drained;  // EAGAIN: nothing was signalled, and the list below is empty too
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return std::exchange(shared_->replies, {});
}

}  // namespace dtrain::agent
