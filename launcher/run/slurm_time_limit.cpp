#include "launcher/run/slurm_time_limit.h"

#include <sys/wait.h>

#include <cstdlib>

#include "launcher/base/strings.h"
#include "launcher/spec/slurm_allocation.h"

namespace dtrain::run {

SlurmTimeLeftLookup::SlurmTimeLeftLookup(const std::string& job, Millis timeout)
    : job_(job), deadline_(std::chrono::steady_clock::now() + timeout), timeout_(timeout) {
  Result<PipedChild> child = PipedChild::spawn({"squeue", "-h", "-j", job, "-o", "%L"}, {});
  if (!child) {
    outcome_ = child.error().message;
    return;
  }
  child_.emplace(std::move(child).value());
  child_->close_input();
}

const std::optional<SlurmTimeLeftLookup::Outcome>& SlurmTimeLeftLookup::poll() {
  if (outcome_ || !child_) return outcome_;
  child_->pump();
  out_ += child_->take_stdout();
  (void)child_->take_stderr();  // unread, it could fill the pipe and stall squeue
  if (child_->stdout_closed() && child_->reaped()) {
    finish();
  } else if (std::chrono::steady_clock::now() >= deadline_) {
    child_->terminate(0);
    outcome_ = "squeue did not finish within " + format_duration(timeout_) + "; it was killed";
    child_.reset();
  }
  return outcome_;
}

void SlurmTimeLeftLookup::finish() {
  int status = *child_->wait_status();
  child_.reset();
  std::optional<int64_t> left_ms;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) left_ms = spec::parse_slurm_time_left_ms(out_);
  if (left_ms) {
    outcome_ = *left_ms;
  } else {
    outcome_ = "squeue printed '" + std::string(trim(out_)) + "'";
  }
}

bool SlurmTimeLimitWatch::due(int64_t now_ms, spdlog::logger& log) {
  if (before_.count() <= 0 || done_) return false;
  if (!deadline_ms_) {
    if (!lookup_) {
      const char* job = std::getenv("SLURM_JOB_ID");
      if (job == nullptr || *job == '\0') {
        done_ = true;
        log.warn("checkpoint.before_walltime is set but this is not a Slurm job (no SLURM_JOB_ID): ignored");
        return false;
      }
      lookup_.emplace(job, Millis(10'000));
      lookup_started_ms_ = now_ms;
    }
    const std::optional<SlurmTimeLeftLookup::Outcome>& left = lookup_->poll();
    if (!left) return false;  // squeue still runs
    if (const std::string* problem = std::get_if<std::string>(&*left)) {
      done_ = true;
      log.warn("checkpoint.before_walltime: no time limit known for Slurm job {} ({}): only SIGUSR1 will ask for a "
               "checkpoint",
               lookup_->job(), *problem);
      return false;
    }
    const int64_t left_ms = std::get<int64_t>(*left);
    // From when squeue was asked: the time it took is time the job spent.
    deadline_ms_ = lookup_started_ms_ + left_ms - before_.count();
    log.info("Slurm job {}: {} s left; checkpoint requested {} s before the limit", lookup_->job(), left_ms / 1000,
             before_.count() / 1000);
  }
  if (now_ms < *deadline_ms_) return false;
  done_ = true;
  return true;
}

}  // namespace dtrain::run
