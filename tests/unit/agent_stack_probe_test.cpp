// The agent's stack fingerprint (launcher/agent/stack_probe.h): which files of a worker command
// are hashed and which interpreter is asked, the small parsers, and the real probe against real
// files and processes: a fake site-packages on PYTHONPATH changes torch's version, another copy
// of the script changes its hash, a hung interpreter is killed at the request's timeout (its
// process group gone) and reported unknown, and the probe's cost is measured. Also the proto
// seam: a hello whose stack does not parse still parses, with the error for the driver to record.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "launcher/agent/stack_probe.h"
#include "launcher/proto/agent_messages.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::agent;
using dtrain::testing::TempDir;

namespace {

// A fake file system for command_files: programs on the "PATH", shebangs, files.
std::map<std::string, std::string>* fake_programs;   // name → resolved path
std::map<std::string, std::string>* fake_first_lines;  // path → first line
std::map<std::string, bool>* fake_files;             // path → exists

std::string fake_resolve(const std::string& name, const std::string&) {
  if (name.find('/') != std::string::npos) return name;
  auto found = fake_programs->find(name);
  return found == fake_programs->end() ? "" : found->second;
}
std::string fake_first_line(const std::string& path) {
  auto found = fake_first_lines->find(path);
  return found == fake_first_lines->end() ? "" : found->second;
}
bool fake_is_file(const std::string& path) { return fake_files->count(path) > 0; }

struct FakeFs {
  std::map<std::string, std::string> programs{{"python3", "/usr/bin/python3"}, {"dtrain-train", "/opt/bin/dtrain-train"},
                                              {"train.sh", "/opt/bin/train.sh"}};
  std::map<std::string, std::string> first_lines{{"/opt/bin/train.sh", "#!/usr/bin/env python3 -u"},
                                                 {"/opt/bin/dtrain-train", "\x7f" "ELF"}};
  std::map<std::string, bool> files{{"/work/train.py", true}, {"/work/cfg.yaml", true}, {"/abs/data.bin", true}};
  FakeFs() {
    fake_programs = &programs;
    fake_first_lines = &first_lines;
    fake_files = &files;
  }
  CommandFiles of(const std::vector<std::string>& argv) {
    return command_files(argv, "/work", "/usr/bin", {&fake_resolve, &fake_first_line, &fake_is_file});
  }
};

void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

int64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

TEST_CASE("command files: a Python command hashes its script and existing file arguments, not the interpreter") {
  FakeFs fs;
  CommandFiles python = fs.of({"python3", "-u", "train.py", "--config", "cfg.yaml", "--lr", "0.1", "/abs/data.bin"});
  CHECK(python.python == "/usr/bin/python3");
  REQUIRE(python.files.size() == 3);
  CHECK(python.files[0].name == "train.py");
  CHECK(python.files[0].path == "/work/train.py");
  CHECK(python.files[1].name == "cfg.yaml");
  CHECK(python.files[2].path == "/abs/data.bin");
  // -c: the program is text, not a file; -m: a module, whose files are the package's.
  CHECK(fs.of({"python3", "-c", "train.py"}).files.empty());
  CHECK(fs.of({"/usr/bin/python3.11", "-m", "mypkg.train"}).python == "/usr/bin/python3.11");
}

TEST_CASE("command files: a binary is hashed itself, a missing one is said, a shebang names the interpreter") {
  FakeFs fs;
  CommandFiles binary = fs.of({"dtrain-train", "--steps", "10"});
  CHECK_FALSE(binary.python);
  REQUIRE(binary.files.size() == 1);
  CHECK(binary.files[0].name == "dtrain-train");
  CHECK(binary.files[0].path == "/opt/bin/dtrain-train");
  CommandFiles missing = fs.of({"no-such-program"});
  REQUIRE(missing.files.size() == 1);
  CHECK(missing.files[0].path.empty());  // reported "missing": a real difference from hosts that have it
  CommandFiles script = fs.of({"train.sh", "train.py"});
  CHECK(script.python == "/usr/bin/python3");
  REQUIRE(script.files.size() == 2);
  CHECK(script.files[0].name == "train.sh");
  CHECK(is_python_name("/usr/bin/python3.11"));
  CHECK(is_python_name("python"));
  CHECK_FALSE(is_python_name("/usr/bin/python3-config"));
  CHECK_FALSE(is_python_name("pythonista"));
}

TEST_CASE("the stack probe's parsers: os-release, the NVIDIA driver, CUDA's version.json, library names, images") {
  CHECK(os_release_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n") == "Debian GNU/Linux 12 (bookworm)");
  CHECK(os_release_name("NAME=x\n").empty());
  CHECK(nvidia_driver_from_proc("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                                "GCC version:  gcc version 12.2.0") == "550.54.15");
  CHECK(nvidia_driver_from_proc("garbage").empty());
  CHECK(cuda_version_from_json(R"({"cuda": {"name": "CUDA SDK", "version": "12.4.1"}})") == "12.4.1");
  CHECK(cuda_version_from_json("{not json").empty());
  CHECK(library_version("libnccl.so.2.21.5", "libnccl.so.") == "2.21.5");
  CHECK(library_version("libnccl.so.2", "libnccl.so.").empty());  // a link to the full one
  CHECK(library_version("libnccl-net.so", "libnccl.so.").empty());
  CHECK(library_version("libcudart.so.12.4.127", "libcudart.so.") == "12.4.127");
  CHECK(image_of({std::string("registry/train@sha256:ab"), std::nullopt, true, false}) == "registry/train@sha256:ab");
  CHECK(image_of({std::nullopt, std::string("engine=\"podman-4.3\"\nimageid=\"3f0a\"\n"), false, false}) == "3f0a");
  CHECK(image_of({std::nullopt, std::nullopt, true, false}).rfind("unknown (", 0) == 0);
  CHECK(image_of({std::nullopt, std::nullopt, false, true}).rfind("unknown (", 0) == 0);
  CHECK(image_of({std::nullopt, std::nullopt, false, false}) == "none");
  proto::StackFingerprint fingerprint;
  CHECK(apply_python_probe_output("noise from a sitecustomize\nDTRAIN_STACK python=3.11.2\nDTRAIN_STACK torch=2.3.1\n"
                                  "DTRAIN_STACK nccl=none\nDTRAIN_STACK cuda=12.1.105\n",
                                  fingerprint));
  CHECK(fingerprint.python == "3.11.2");
  CHECK(fingerprint.torch == "2.3.1");
  CHECK(fingerprint.python_nccl == "none");
  CHECK(fingerprint.python_cuda == "12.1.105");
  proto::StackFingerprint none;
  CHECK_FALSE(apply_python_probe_output("Traceback (most recent call last):\n", none));
}

TEST_CASE("the stack probe: torch from a fake site-packages, the script's hash, and what it costs") {
  TempDir dir;
  write_file(dir.path + "/site/torch-9.9.9.dist-info/METADATA", "Name: torch\nVersion: 9.9.9\n");
  write_file(dir.path + "/egg/torch.egg-info/PKG-INFO", "Metadata-Version: 1.0\nName: torch\nVersion: 7.0.1\n");
  write_file(dir.path + "/train.py", "print('a')\n");
  proto::StackProbeRequest request{{"/usr/bin/python3", "train.py"}, dir.path, {}, 5000};
  if (!std::filesystem::exists("/usr/bin/python3")) return;  // a machine without Python: nothing to probe

  auto started = std::chrono::steady_clock::now();
  proto::StackFingerprint plain = probe_stack(request);
  int64_t plain_ms = elapsed_ms(started);
  REQUIRE(plain.python);
  CHECK(plain.python->rfind("3.", 0) == 0);
  REQUIRE(plain.files.size() == 1);
  CHECK(plain.files[0].path == "train.py");
  CHECK(plain.files[0].sha256.size() == 64);
  CHECK(plain.kernel != "unknown");

  request.env["PYTHONPATH"] = dir.path + "/site";
  proto::StackFingerprint fake = probe_stack(request);
  CHECK(fake.torch == "9.9.9");
  CHECK(fake.python == plain.python);
  request.env["PYTHONPATH"] = dir.path + "/egg";  // no version in the name: PKG-INFO says it
  CHECK(probe_stack(request).torch == "7.0.1");

  write_file(dir.path + "/train.py", "print('another copy')\n");
  CHECK(probe_stack(request).files[0].sha256 != plain.files[0].sha256);
  MESSAGE("stack probe of /usr/bin/python3 train.py: " << plain_ms << " ms wall, " << plain.ms
          << " ms by its own count (interpreter start and a sys.path scan; the machine's load included)");
}

TEST_CASE("the stack probe: a hung interpreter is killed with its process group at the timeout and reported unknown") {
  TempDir dir;
  // A "python3" that never answers, and leaves a child behind in its group. The timeout is long
  // enough for the shell to have started its child on a loaded machine; the probe must wait that
  // long and no longer than the processes' own 300 s (no wall-clock bound tighter than that: the
  // machines are shared).
  write_file(dir.path + "/bin/python3", "#!/bin/sh\nsleep 300 &\necho $! > " + dir.path + "/child.pid\nsleep 300\n", 0755);
  proto::StackProbeRequest request{{dir.path + "/bin/python3", "train.py"}, dir.path, {}, 3000};
  auto started = std::chrono::steady_clock::now();
  proto::StackFingerprint fingerprint = probe_stack(request);
  int64_t took = elapsed_ms(started);
  CHECK(took >= 3000);
  CHECK(took < 300 * 1000);
  REQUIRE(fingerprint.torch);
  CHECK(fingerprint.torch->rfind("unknown (", 0) == 0);
  CHECK(fingerprint.python->rfind("unknown (", 0) == 0);
  REQUIRE_FALSE(fingerprint.notes.empty());
  CHECK(fingerprint.notes[0].find("did not finish") != std::string::npos);
  std::ifstream pid_file(dir.path + "/child.pid");
  int child = 0;
  pid_file >> child;
  REQUIRE(child > 0);
  // Gone with the group (or a zombie waiting for whoever inherited it: it runs no more). The
  // SIGKILL was sent to the group; the grandchild, which the probe cannot reap, may take a
  // moment to be scheduled and die on a loaded machine (CI saw it still "R"): wait for that,
  // bounded. A child that ignored the kill would still be sleeping ("S") after 10 s.
  std::string state;
  for (int tries = 0; tries < 1000; ++tries) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid_text, name;
    state.clear();
    stat >> pid_text >> name >> state;
    if (state.empty() || state == "Z") break;
    ::usleep(10'000);
  }
  CHECK_MESSAGE((state.empty() || state == "Z"), "pid " << child << " is in state " << state);
  MESSAGE("a hung interpreter cost the probe " << took << " ms with a 3000 ms timeout");

  // One that floods its output is killed at the bound, not read forever.
  write_file(dir.path + "/bin/python3", "#!/bin/sh\nexec yes DTRAIN_STACK\n", 0755);
  request.timeout_ms = 300;
  fingerprint = probe_stack(request);
  CHECK(fingerprint.torch->rfind("unknown (", 0) == 0);
}

TEST_CASE("a hello whose stack does not parse still parses: the host connects and the error is kept") {
  nlohmann::json hello = {{"type", "hello"}, {"protocol", 1}, {"version", "0.1"}, {"pid", 10},
                          {"stack", {{"torch", 7}, {"files", "x"}}}};
  Result<proto::AgentMessage> parsed = proto::parse_agent_message(hello);
  REQUIRE(parsed);
  const auto& typed = std::get<proto::AgentHello>(*parsed);
  CHECK_FALSE(typed.stack);
  REQUIRE(typed.stack_error);
  CHECK(typed.stack_error->find("hello.stack.torch") != std::string::npos);
  // Too many files is refused, not kept.
  nlohmann::json files = nlohmann::json::array();
  for (int i = 0; i < 17; ++i) files.push_back({{"path", "f" + std::to_string(i)}, {"sha256", "ab"}});
  hello["stack"] = {{"files", files}};
  CHECK(std::get<proto::AgentHello>(*proto::parse_agent_message(hello)).stack_error);
}
