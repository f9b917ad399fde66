#include "launcher/run/pod_watch.h"

#include "launcher/base/strings.h"

namespace dtrain::run {

PodWatch::PodWatch(transport::KubectlOptions options, std::string selector, std::set<std::string> pods)
    : options_(std::move(options)), selector_(std::move(selector)), pods_(std::move(pods)) {}

std::optional<pid_t> PodWatch::pid() const {
  if (!child_ || child_->reaped()) return std::nullopt;
  return child_->pid();
}

void PodWatch::start(int64_t now_ms, std::vector<std::string>& warnings) {
  next_start_ms_ = now_ms + kRestartSpacingMs;
  stream_ = spec::JsonObjectStream();
  stderr_tail_.clear();
  // Its own process group, killed with us: a Ctrl-C reaches the supervisor, not the watch.
  Result<PipedChild> child = PipedChild::spawn(transport::kubectl_watch_argv(options_, selector_),
                                               {.own_process_group = true, .kill_with_parent = true});
  if (!child) {
    warnings.push_back("the pod watch did not start (" + child.error().message +
                       "); lost pods are noticed only by heartbeat.timeout");
    return;
  }
  child_.emplace(std::move(child).value());
  child_->close_input();
}

std::vector<LostPod> PodWatch::poll(int64_t now_ms, std::vector<std::string>& warnings) {
  std::vector<LostPod> lost;
  if (!child_ && now_ms >= next_start_ms_) start(now_ms, warnings);
  if (!child_) return lost;
  child_->pump();
  stream_.append(child_->take_stdout());
  stderr_tail_ += child_->take_stderr();
  if (stderr_tail_.size() > 2048) stderr_tail_.erase(0, stderr_tail_.size() - 2048);
  while (std::optional<std::string> object = stream_.next()) handle_object(*object, lost, warnings);
  bool ended = child_->output_closed() || stream_.broken();
  if (ended) {
    std::string why = stream_.broken() ? stream_.problem()
                                       : transport::explain_kubectl_failure("the pod watch (kubectl get pods -w)",
                                                                            stderr_tail_, options_);
    warnings.push_back(why + "; started again");
    child_->terminate(0);
    child_.reset();
  }
  return lost;
}

void PodWatch::handle_object(const std::string& text, std::vector<LostPod>& lost, std::vector<std::string>& warnings) {
  Result<spec::PodWatchEvent> event = spec::parse_pod_watch_event(text);
  if (!event) {
    warnings.push_back("the pod watch sent what is not a watch event: " + event.error().message);
    return;
  }
  if (event->type == spec::PodWatchEvent::Type::error) {
    warnings.push_back("the pod watch reports: " + event->error);
    return;
  }
  if (!pods_.count(event->pod.name) || reported_.count(event->pod.name)) return;
  if (std::optional<std::string> reason = spec::pod_loss_reason(*event)) {
    reported_.insert(event->pod.name);
    lost.push_back({event->pod.name, *reason});
  }
}

}  // namespace dtrain::run
