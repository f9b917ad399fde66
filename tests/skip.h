#pragma once
// skip_test: how a test that cannot run on this machine (no root, no `ip netns`, no torch, no
// GPU, no nft) says so. It prints "skipped: <reason>" and exits with status 77, which ctest
// reports as *skipped*, not passed (SKIP_RETURN_CODE 77 on every test, tests/CMakeLists.txt),
// and scripts/test.sh counts by reason at the end of a run.
//
//   if (!torch_available()) dtrain::testing::skip_test("/usr/bin/python3 cannot import torch");
//
// ctest runs each doctest case in a process of its own, so the exit ends just that case. Run a
// test binary by hand and the first skip ends the binary: select one case with --test-case=.
//
// Nothing runs after the message: no destructor, no atexit handler (std::_Exit). Skip BEFORE
// the test creates anything that needs cleaning up (processes, namespaces, mounts, temporary
// directories): what exists at the skip is left behind.

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace dtrain::testing {

/// The exit status ctest maps to "skipped"; the same as scripts/testcluster.sh's "cannot run here".
constexpr int kSkipExitCode = 77;

/// Prints "skipped: <reason>" (on one line: scripts/test.sh groups skips by that line) and
/// exits with kSkipExitCode.
[[noreturn]] inline void skip_test(const std::string& reason) {
  std::string line = reason;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::cout.flush();
  std::fprintf(stdout, "skipped: %s\n", line.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  // _Exit, not exit: doctest's own end-of-run report would follow and read like a pass, and
  // static destructors could run while a test's threads still use those objects.
  std::_Exit(kSkipExitCode);
}

/// Skips the test unless `nvidia-smi -L` lists at least `needed` GPUs (NCCL takes one rank per
/// GPU in a communicator); `what` says what needs them.
inline void require_gpus(int needed, const std::string& what) {
  int gpus = 0;
  if (FILE* listing = ::popen("nvidia-smi -L 2>/dev/null", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, listing) != nullptr) gpus += std::string(line).rfind("GPU ", 0) == 0;
    ::pclose(listing);
  }
  if (gpus < needed) {
    skip_test(what + " needs " + std::to_string(needed) + " CUDA GPUs on this host; nvidia-smi -L lists " +
              std::to_string(gpus));
  }
}

/// Skips the test (exit 77, reported as skipped) unless /usr/bin/python3 can import `module`
/// (python3-torch for "torch.optim", "torch.distributed").
inline void require_python_module(const std::string& module) {
  if (std::system(("/usr/bin/python3 -c 'import " + module + "' >/dev/null 2>&1").c_str()) != 0) {
    skip_test("/usr/bin/python3 cannot import " + module + " (apt-get install python3-torch)");
  }
}

}  // namespace dtrain::testing
