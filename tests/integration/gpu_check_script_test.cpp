// scripts/gpu_check.sh is what a lent GPU machine runs, with little time to debug it there. Its
// --dry-run runs the same agent-metrics checks here against tests/fakes' nvidia-smi and fake NVML,
// so the script cannot rot between GPU loans; without a GPU and without --dry-run it must skip.

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "launcher/base/child_process.h"
#include "launcher/base/fd.h"

using namespace dtrain;

namespace {
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("gpu_check.sh --dry-run: the agent's GPU metrics through NVML and through the nvidia-smi fallback") {
  char pattern[] = "/tmp/dtrain-gpu-check-test-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  std::string out = pattern;
  struct RemoveAtEnd {  // also when a REQUIRE below ends the test early
    std::string path;
    ~RemoveAtEnd() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_at_end{out};
  std::string script = std::string(DTRAIN_SOURCE_DIR) + "/scripts/gpu_check.sh";
  Result<CommandOutput> dry = run_command(
      {"/usr/bin/env", "OUT=" + out, "bash", script, DTRAIN_BINARY_DIR, "--dry-run"}, Millis(120'000));
  REQUIRE(dry.ok());
  INFO(dry->out, dry->err);
  CHECK(dry->exit_code == 0);
  Result<std::string> summary = read_file(out + "/gpu_check.txt");
  REQUIRE(summary.ok());
  CHECK(contains(*summary, "gpus: 2"));
  CHECK(contains(*summary, "PASS agent GPU metrics through NVML"));
  CHECK(contains(*summary, "gpu_source nvml, 2 GPUs"));
  CHECK(contains(*summary, "PASS agent GPU metrics through the nvidia-smi fallback"));
  CHECK(contains(*summary, "gpu_source nvidia-smi, 2 GPUs"));
  CHECK_FALSE(contains(*summary, "FAIL"));

  // This machine has no GPU (or nvidia-smi): the real run skips, exit 77, and says why.
  if (::system("command -v nvidia-smi > /dev/null 2>&1") != 0) {
    Result<CommandOutput> real = run_command(
        {"/usr/bin/env", "OUT=" + out, "bash", script, DTRAIN_BINARY_DIR, "--no-build"}, Millis(60'000));
    REQUIRE(real.ok());
    CHECK(real->exit_code == 77);
    CHECK(contains(real->out, "SKIP no GPU here"));
  }
}
