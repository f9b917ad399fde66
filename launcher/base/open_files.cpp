#include "launcher/base/open_files.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "launcher/base/fd.h"

namespace dtrain {
namespace {

constexpr uint64_t kDescriptorsPerHost = 4;
constexpr uint64_t kDescriptorsBesideHosts = 256;

/// The kernel's ceiling for any process's limit (fs.nr_open); 1,048,576 by default.
uint64_t kernel_ceiling() {
  if (Result<std::string> text = read_file("/proc/sys/fs/nr_open")) {
    uint64_t value = std::strtoull(text->c_str(), nullptr, 10);
    if (value > 0) return value;
  }
  return 1u << 20;
}

}  // namespace

uint64_t open_files_needed(size_t hosts) { return kDescriptorsBesideHosts + kDescriptorsPerHost * hosts; }

Result<OpenFileLimit> raise_open_file_limit(uint64_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return Error::infra("getrlimit(RLIMIT_NOFILE): " + errno_text(errno));
  OpenFileLimit result;
  // Unlimited (RLIM_INFINITY) is not a value setrlimit accepts for NOFILE beyond nr_open: cap it.
  const uint64_t ceiling = kernel_ceiling();
  uint64_t hard = limit.rlim_max == RLIM_INFINITY ? ceiling : static_cast<uint64_t>(limit.rlim_max);
  if (hard < needed) {
    rlimit wanted{static_cast<rlim_t>(std::min(needed, ceiling)), static_cast<rlim_t>(std::min(needed, ceiling))};
    if (::setrlimit(RLIMIT_NOFILE, &wanted) == 0) {
      hard = wanted.rlim_max;
      result.raised_hard = true;
    }
  }
  rlimit raised{static_cast<rlim_t>(hard), static_cast<rlim_t>(hard)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    raised.rlim_cur = limit.rlim_cur;  // leave it as it was
  }
  result.soft = static_cast<uint64_t>(raised.rlim_cur);
  result.hard = hard;
  if (result.soft >= needed) return result;
  return Error::user("this many hosts need about " + std::to_string(needed) + " open files and dtrain may open " +
                     std::to_string(result.soft) + " (hard limit " + std::to_string(result.hard) +
                     (needed > ceiling ? ", above the kernel's fs.nr_open " + std::to_string(ceiling)
                                       : std::string(", which only a process with CAP_SYS_RESOURCE may raise")) +
                     "); hosts beyond that are lost while connecting with \"Too many open files\". Raise it: "
                     "`ulimit -Hn " + std::to_string(needed) + "` as root before dtrain, LimitNOFILE= in a systemd "
                     "unit, or nofile in /etc/security/limits.conf");
}

}  // namespace dtrain
