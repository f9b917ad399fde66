#pragma once
// Makes writes fail part-way, as a full disk does, without a full disk: RLIMIT_FSIZE stops a
// write at the limit (a short write, then EFBIG), and SIGXFSZ is ignored so that the process
// sees the error instead of dying. Unit tests are single-threaded, so the process-wide limit
// affects only the code under test; the destructor restores both.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdint>

namespace dtrain::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &saved_action_) == 0);
    struct rlimit limited = saved_;
    limited.rlim_cur = static_cast<rlim_t>(bytes);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit saved_{};
  struct sigaction saved_action_{};
};

}  // namespace dtrain::testing
