#include "launcher/runlog/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace dtrain {
namespace {

constexpr size_t kMaxHolderBytes = 256;

std::string holder_line() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::to_string(::getpid()) + " " + (host[0] ? host : "unknown-host") + "\n";
}

}  // namespace

std::string describe_lock_holder(const std::string& lock_file_text) {
  std::string line = lock_file_text.substr(0, std::min(lock_file_text.find('\n'), kMaxHolderBytes));
  size_t space = line.find(' ');
  std::string pid = line.substr(0, space);
  std::string host = space == std::string::npos ? "" : line.substr(space + 1);
  bool plain_pid = !pid.empty() && pid.size() <= 10 && pid.find_first_not_of("0123456789") == std::string::npos;
  bool plain_host = !host.empty() && host.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == std::string::npos;
  // A holder that has not written its line yet (it locks first, then writes) is still a holder.
  if (!plain_pid) return "another dtrain (it has not named itself yet)";
  return "pid " + pid + (plain_host ? " on host " + host : "");
}

Result<RunLock> RunLock::acquire(const RunDirectory& run) {
  std::string path = run.path() + "/lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) return Error::infra(path + ": cannot open the run's lock file: " + errno_text(errno));
  int locked;
  do {
    locked = ::flock(fd.get(), LOCK_EX | LOCK_NB);
  } while (locked != 0 && errno == EINTR);
  if (locked != 0) {
    if (errno != EWOULDBLOCK) return Error::infra(path + ": flock: " + errno_text(errno));
    std::string text;
    bool would_block = false;
    (void)read_some(fd.get(), text, &would_block);
    return Error::user("run " + run.id() + " is still supervised by " + describe_lock_holder(text) + " (it holds " +
                       path + "); `dtrain stop " + run.id() + "` ends it, or wait for it to finish");
  }
  RunLock lock(path, std::move(fd));
  if (Status recorded = lock.record_holder(); !recorded) return recorded.error();
  return lock;
}

Status RunLock::record_holder() const {
  std::string line = holder_line();
  if (::ftruncate(fd_.get(), 0) != 0 || ::pwrite(fd_.get(), line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    return Error::infra(path_ + ": cannot record the lock's holder: " + errno_text(errno));
  }
  return {};
}

}  // namespace dtrain
