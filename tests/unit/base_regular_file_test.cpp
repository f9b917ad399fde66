// read_regular_file / open_regular_file: anything but a regular file is refused at once with a
// message that says what it is (a FIFO never blocks), sizes are bounded before a byte is read,
// and a planted symbolic link is refused where dtrain chose the name. Also the temp files of
// write_file_atomic: unpredictable names, O_EXCL|O_NOFOLLOW, the mode asked for.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "tests/unit/temp_dir.h"

namespace dtrain {
namespace {

using testing::TempDir;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// A FIFO or a device that blocked the reader would hang the test: SIGALRM ends it (as a
/// failure) instead. Cancelled when the case ends.
struct HangGuard {
  explicit HangGuard(unsigned seconds) { ::alarm(seconds); }
  ~HangGuard() { ::alarm(0); }
};

std::string refusal(const std::string& path, FollowLinks follow = FollowLinks::kYes, size_t max_bytes = 1 << 20) {
  Result<std::string> text = read_regular_file(path, max_bytes, follow);
  REQUIRE_FALSE(text.ok());
  CHECK(text.error().kind == ErrorKind::user);
  return text.error().message;
}

/// A listening AF_UNIX socket bound at `path`; closed (the name stays) when it goes.
struct BoundSocket {
  UniqueFd fd;
  explicit BoundSocket(const std::string& path) : fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd.valid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof address.sun_path);
    path.copy(address.sun_path, path.size());
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd.get(), 1) == 0);
  }
};

TEST_CASE("a regular file is read whole, and a link the user made is followed only with FollowLinks::kYes") {
  TempDir dir;
  std::string file = dir.write("spec.yaml", "version: 1\n");
  Result<std::string> text = read_regular_file(file, 1 << 20, FollowLinks::kNo);
  REQUIRE(text.ok());
  CHECK(*text == "version: 1\n");

  std::string link = dir.path + "/link.yaml";
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  Result<std::string> followed = read_regular_file(link, 1 << 20, FollowLinks::kYes);
  REQUIRE(followed.ok());
  CHECK(*followed == "version: 1\n");
  CHECK(contains(refusal(link, FollowLinks::kNo), "'" + link + "' is a symbolic link"));
  // A link to a FIFO, followed, is still a FIFO.
  std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string fifo_link = dir.path + "/fifo-link";
  REQUIRE(::symlink(fifo.c_str(), fifo_link.c_str()) == 0);
  HangGuard guard(10);
  CHECK(contains(refusal(fifo_link), "is a FIFO (named pipe), not a regular file"));
}

TEST_CASE("a FIFO with no writer, a socket, a device and a directory are refused at once, each by name") {
  HangGuard guard(10);  // open(O_RDONLY) of a FIFO without a writer blocks forever
  TempDir dir;
  std::string fifo = dir.path + "/fifo.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(refusal(fifo) == "'" + fifo + "' is a FIFO (named pipe), not a regular file");
  CHECK(refusal(fifo, FollowLinks::kNo) == "'" + fifo + "' is a FIFO (named pipe), not a regular file");

  std::string socket_path = dir.path + "/sock.yaml";
  BoundSocket socket(socket_path);
  CHECK(refusal(socket_path) == "'" + socket_path + "' is a socket, not a regular file");

  CHECK(refusal("/dev/null") == "'/dev/null' is a character device, not a regular file");
  CHECK(refusal("/dev/zero", FollowLinks::kNo) == "'/dev/zero' is a character device, not a regular file");
  CHECK(refusal(dir.path) == "'" + dir.path + "' is a directory, not a regular file");
  CHECK(refusal(dir.path + "/missing") == "cannot read '" + dir.path + "/missing': No such file or directory");

  Result<UniqueFd> opened = open_regular_file(fifo, FollowLinks::kYes);
  CHECK_FALSE(opened.ok());
}

TEST_CASE("the size is bounded before a byte is read: a sparse 1 GiB file is refused at once") {
  TempDir dir;
  std::string big = dir.path + "/plan-0.json";
  {
    UniqueFd fd(::open(big.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(fd.valid());
    REQUIRE(::ftruncate(fd.get(), off_t{1} << 30) == 0);
  }
  Result<std::string> text = read_regular_file(big, 64 << 20, FollowLinks::kNo, "fix it");
  REQUIRE_FALSE(text.ok());
  CHECK(text.error().message == "'" + big + "' is 1.0 GiB, over the 64 MiB limit; fix it");

  std::string exact = dir.write("exact", std::string(1024, 'x'));
  CHECK(read_regular_file(exact, 1024, FollowLinks::kNo).ok());
  CHECK(refusal(exact, FollowLinks::kNo, 1023) == "'" + exact + "' is 1 KiB, over the 1023 bytes limit");
}

TEST_CASE("describe_bytes and describe_file_type say what a person reads") {
  CHECK(describe_bytes(300) == "300 bytes");
  CHECK(describe_bytes(16 << 20) == "16 MiB");
  CHECK(describe_bytes(1536 * 1024) == "1.5 MiB");
  CHECK(describe_file_type(S_IFBLK | 0660) == "a block device");
  CHECK(describe_file_type(S_IFREG | 0600) == "a regular file");
}

TEST_CASE("expand_home: ~ and ~/x from HOME, other paths unchanged") {
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  if (home.empty()) return;
  CHECK(expand_home("~/.ssh/config") == home + "/.ssh/config");
  CHECK(expand_home("~") == home);
  CHECK(expand_home("~other/x") == "~other/x");
  CHECK(expand_home("/etc/ssh/ssh_config") == "/etc/ssh/ssh_config");
}

TEST_CASE("write_file_atomic never follows a link planted at a temp name, and sets the mode asked for") {
  TempDir dir;
  std::string victim = dir.write("victim", "untouched\n");
  std::string path = dir.path + "/report.html";
  // The old fixed temp names: "<path>.tmp.<pid>" (launcher) and "<path>.tmp" (agent), planted as
  // links to a file the writer must not touch.
  for (const std::string& planted : {path + ".tmp." + std::to_string(::getpid()), path + ".tmp"}) {
    REQUIRE(::symlink(victim.c_str(), planted.c_str()) == 0);
  }
  mode_t old_umask = ::umask(077);
  Status written = write_file_atomic(path, "<html></html>\n", 0640);
  ::umask(old_umask);
  REQUIRE(written.ok());
  std::ifstream victim_in(victim);
  std::string victim_text((std::istreambuf_iterator<char>(victim_in)), std::istreambuf_iterator<char>());
  CHECK(victim_text == "untouched\n");
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  CHECK(S_ISREG(info.st_mode));
  CHECK((info.st_mode & 07777) == 0640);  // exactly: umask 077 did not narrow it

  REQUIRE(write_file_atomic(path, "again\n").ok());
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0600);
  // No temp file of ours is left; the planted links are still there, untouched.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    (void)entry;
    ++entries;
  }
  CHECK(entries == 4);  // victim, report.html and the two planted links
}

TEST_CASE("temp names are unpredictable and a name already taken is never opened") {
  TempDir dir;
  std::string first, second;
  UniqueFd a = create_exclusive_temp(dir.path + "/f", 0600, first);
  UniqueFd b = create_exclusive_temp(dir.path + "/f", 0600, second);
  REQUIRE(a.valid());
  REQUIRE(b.valid());
  CHECK(first != second);
  CHECK(first.size() == (dir.path + "/f.tmp.").size() + 16);
  CHECK(unpredictable_suffix() != unpredictable_suffix());
}

}  // namespace
}  // namespace dtrain
