// `dtrain report DIR` on a real finished run whose directory someone else has tampered with: a
// plan that is a link to /etc/shadow (or another file outside the run), a sparse 1 GiB plan, a
// FIFO among the host files. The report is still written, shows what it could read and names
// each refused file; it never holds the linked file's text and never waits on the FIFO. Without
// a readable events.jsonl (a link, a FIFO) it fails cleanly with exit 2. report.html and
// timeline.json are 0600 unless --mode says otherwise.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

/// Far beyond what a report of a tiny run takes; only a reader that waits on a FIFO reaches it.
constexpr int64_t kDeadlineMs = 60'000;

unsigned mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

/// A finished one-rank run of /bin/true: its run directory.
std::string finished_run(DtrainEnv& env) {
  std::string spec = env.write_spec("ok.yaml", "version: 1\nname: tamper\nslots_per_host: 1\n"
                                               "worker:\n  command: [/bin/true]\n");
  DtrainProcess submit = env.run({"submit", spec});
  REQUIRE(submit.exit_code == 0);
  REQUIRE(env.run_dirs().size() == 1);
  return env.run_dirs()[0];
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("report.html and timeline.json are 0600 by default, --mode 0644 shares them, --mode 0777 is refused") {
  DtrainEnv env;
  std::string dir = finished_run(env);
  // A link planted at a fixed temp name (the agent's old "<path>.tmp") is not written through.
  std::string victim = env.dir.path + "/victim";
  write_text(victim, "untouched\n");
  REQUIRE(::symlink(victim.c_str(), (dir + "/report.html.tmp").c_str()) == 0);

  DtrainProcess report = env.run({"report", dir}, kDeadlineMs);
  REQUIRE(report.exit_code == 0);
  CHECK(mode_of(dir + "/report.html") == 0600);
  CHECK(mode_of(dir + "/timeline.json") == 0600);
  CHECK(read_text(victim) == "untouched\n");

  CHECK(env.run({"report", dir, "--mode", "0644"}, kDeadlineMs).exit_code == 0);
  CHECK(mode_of(dir + "/report.html") == 0644);
  CHECK(mode_of(dir + "/timeline.json") == 0644);

  DtrainProcess refused = env.run({"report", dir, "--mode", "0777"}, kDeadlineMs);
  CHECK(refused.exit_code == 2);
  CHECK(contains(refused.err(), "--mode '0777' is not a report file mode"));
}

TEST_CASE("a plan linked to a secret, a 1 GiB plan and a FIFO host file: the report renders the rest and names each") {
  DtrainEnv env;
  std::string dir = finished_run(env);
  // /etc/shadow where it exists (root can read it: only O_NOFOLLOW stops the report), and a
  // secret of our own in any case, outside the run directory.
  std::string secret = env.dir.path + "/secret.json";
  write_text(secret, "{\"world_size\": 1, \"note\": \"SECRET-OUTSIDE-THE-RUN\"}\n");
  std::string shadow = ::access("/etc/shadow", F_OK) == 0 ? "/etc/shadow" : secret;
  REQUIRE(::symlink(shadow.c_str(), (dir + "/plan-7.json").c_str()) == 0);
  REQUIRE(::symlink(secret.c_str(), (dir + "/plan-8.json").c_str()) == 0);
  {
    int fd = ::open((dir + "/plan-9.json").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t{1} << 30) == 0);  // sparse: 1 GiB by size, nothing on disk
    ::close(fd);
  }
  std::filesystem::create_directories(dir + "/hosts");
  REQUIRE(::mkfifo((dir + "/hosts/evil.json").c_str(), 0600) == 0);

  DtrainProcess report = env.run({"report", dir}, kDeadlineMs);
  CHECK_MESSAGE(report.exit_code == 0, report.err());
  CHECK(contains(report.err(), "warning: 4 files of the run left out (named at the end of the report)"));
  std::string html = read_text(dir + "/report.html");
  REQUIRE_FALSE(html.empty());
  CHECK_FALSE(contains(html, "SECRET-OUTSIDE-THE-RUN"));
  for (const char* shadow_line : {"root:*", "root:!", "root:$", "daemon:*"}) CHECK_FALSE(contains(html, shadow_line));
  CHECK(contains(html, "What could not be read"));
  CHECK(contains(html, "plan-7.json&#39; is a symbolic link"));
  CHECK(contains(html, "plan-8.json&#39; is a symbolic link"));
  CHECK(contains(html, "plan-9.json&#39; is 1.0 GiB, over the 256 MiB limit"));
  CHECK(contains(html, "evil.json&#39; is a FIFO (named pipe), not a regular file"));
}

TEST_CASE("events.jsonl as a link or a FIFO: the report fails at once with exit 2 and says why") {
  DtrainEnv env;
  std::string dir = finished_run(env);
  std::string events = dir + "/events.jsonl";
  std::string copy = env.dir.path + "/events-copy.jsonl";
  std::filesystem::copy_file(events, copy);
  std::filesystem::remove(events);

  REQUIRE(::symlink(copy.c_str(), events.c_str()) == 0);
  DtrainProcess linked = env.run({"report", dir}, kDeadlineMs);
  CHECK(linked.exit_code == 2);
  CHECK(contains(linked.err(), "events.jsonl' is a symbolic link"));

  std::filesystem::remove(events);
  REQUIRE(::mkfifo(events.c_str(), 0600) == 0);
  DtrainProcess fifo = env.start({"report", dir});
  CHECK_MESSAGE(fifo.wait(kDeadlineMs), "dtrain report waited on a FIFO (killed at the deadline)");
  CHECK(fifo.exit_code == 2);
  CHECK(contains(fifo.err(), "events.jsonl' is a FIFO (named pipe), not a regular file"));
}
