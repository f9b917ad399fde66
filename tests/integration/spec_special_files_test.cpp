// A spec, hostfile, env_file or ssh.config that is not a regular file — a FIFO nobody writes
// to, a listening AF_UNIX socket, a device — is refused by the real `dtrain validate` and
// `dtrain submit` at once: exit 2, a message naming the path and what it is, no run directory.
// A FIFO used to make both wait forever. A hang fails the case (the process is killed at the
// deadline), it never hangs the suite.

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

/// Far beyond what a refusal takes (milliseconds); only a process that waits on the file gets
/// here, and then the case fails.
constexpr int64_t kDeadlineMs = 20'000;

struct SpecialFile {
  std::string kind;   ///< as the message says it
  std::string path;
};

/// A FIFO, a bound and listening AF_UNIX socket (held open for the test) and /dev/null.
struct SpecialFiles {
  std::vector<SpecialFile> files;
  int socket_fd = -1;
  explicit SpecialFiles(const std::string& dir) {
    std::string fifo = dir + "/special.fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    files.push_back({"a FIFO (named pipe)", fifo});

    std::string socket_path = dir + "/special.sock";
    socket_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(socket_fd >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(socket_path.size() < sizeof address.sun_path);
    socket_path.copy(address.sun_path, socket_path.size());
    REQUIRE(::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(socket_fd, 1) == 0);
    files.push_back({"a socket", socket_path});

    files.push_back({"a character device", "/dev/null"});
  }
  ~SpecialFiles() {
    if (socket_fd >= 0) ::close(socket_fd);
  }
};

/// The spec that names `path` in `role` ("spec" is the spec file itself: no spec is written).
std::string spec_naming(DtrainEnv& env, const std::string& role, const std::string& path) {
  const std::string worker = "worker:\n  command: [/bin/true]\n";
  if (role == "spec") return path;
  if (role == "hostfile") return env.write_spec("hostfile.yaml", "version: 1\nhostfile: " + path + "\n" + worker);
  if (role == "env_file") return env.write_spec("env_file.yaml", "version: 1\n" + worker + "  env_file: " + path + "\n");
  REQUIRE(role == "ssh.config");
  return env.write_spec("ssh_config.yaml", "version: 1\nhosts: [localhost]\nssh: {client: openssh, config: " + path +
                                               "}\n" + worker);
}

}  // namespace

TEST_CASE("a FIFO, a socket and a device as spec, hostfile, env_file and ssh.config: validate and submit exit 2 at once, naming it") {
  DtrainEnv env;
  SpecialFiles special(env.dir.path);
  for (std::string role : {"spec", "hostfile", "env_file", "ssh.config"}) {
    for (const SpecialFile& file : special.files) {
      for (std::string command : {"validate", "submit"}) {
        CAPTURE(role);
        CAPTURE(file.path);
        CAPTURE(command);
        std::string spec = spec_naming(env, role, file.path);
        DtrainProcess process = env.start({command, spec});
        bool exited = process.wait(kDeadlineMs);
        CHECK_MESSAGE(exited, "dtrain " << command << " waited on " << file.kind << " (killed at the deadline)");
        CHECK(process.exit_code == 2);
        std::string err = process.err();
        CAPTURE(err);
        CHECK(err.find("'" + file.path + "' is " + file.kind + ", not a regular file") != std::string::npos);
        if (role != "spec") CHECK(err.find(role) != std::string::npos);  // the key that names it
        CHECK(env.run_dirs().empty());
      }
    }
  }
}

TEST_CASE("a spec reached through a symbolic link the user made is still read (only run-directory files refuse links)") {
  DtrainEnv env;
  std::string spec = env.write_spec("real.yaml", "version: 1\nworker:\n  command: [/bin/true]\n");
  std::string link = env.dir.path + "/link.yaml";
  REQUIRE(::symlink(spec.c_str(), link.c_str()) == 0);
  DtrainProcess process = env.run({"validate", link}, kDeadlineMs);
  CHECK(process.exit_code == 0);
}
