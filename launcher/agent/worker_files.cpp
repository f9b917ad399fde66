#include "launcher/agent/worker_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "launcher/agent/python_bootstrap.h"
#include "launcher/base/fd.h"

namespace dtrain::agent {
namespace {

using nlohmann::json;

Status make_private_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::infra("cannot create '" + path + "': " + errno_text(errno));
  }
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid()) {
    return Error::infra("'" + path + "' is not a directory of ours; remove it (a previous agent of another "
                        "user, or a planted symlink)");
  }
  return {};
}

// Written whole and renamed into place (write_file_atomic: an unpredictable O_EXCL|O_NOFOLLOW temp
// name), so that a worker never imports half a file. Unsynced: the files are made again at
// every agent start, and a machine crash ends the workers that would import them anyway.
Status write_file(const std::string& path, std::string_view text) {
  return write_file_atomic(path, text, 0600, Durability::kUnsynced);
}

// Removes `path` and what is in it: the bootstrap, error files, and the __pycache__ that Python
// writes next to the bootstrap (workers run as our uid). Entries are unlinked, never followed.
void remove_tree(const std::string& path, int depth) {
  DIR* directory = ::opendir(path.c_str());
  if (directory != nullptr) {
    while (dirent* entry = ::readdir(directory)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      std::string child = path + "/" + name;
      struct stat info{};
      if (::lstat(child.c_str(), &info) != 0) continue;
      if (S_ISDIR(info.st_mode) && depth < 3) {
        remove_tree(child, depth + 1);
      } else {
        ::unlink(child.c_str());
      }
    }
    ::closedir(directory);
  }
  ::rmdir(path.c_str());
}

// "ValueError: bad batch" → ("ValueError", "bad batch"); a dotted name counts too
// ("torch.distributed.DistBackendError: ..."). Anything else has no type.
std::pair<std::optional<std::string>, std::string> split_type(const std::string& message) {
  size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0 || colon > 200) return {std::nullopt, message};
  for (size_t i = 0; i < colon; ++i) {
    char c = message[i];
    bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
                (i > 0 && c >= '0' && c <= '9');
    if (!word) return {std::nullopt, message};
  }
  return {message.substr(0, colon), message.substr(colon + 2)};
}

}  // namespace

Result<WorkerFiles> WorkerFiles::create(std::string directory) {
  if (Status made = make_private_directory(directory); !made) return made.error();
  WorkerFiles files(directory);  // from here on, the destructor cleans up
  if (Status made = make_private_directory(files.python_path()); !made) return made.error();
  for (const embedded::EmbeddedFile& file : embedded::kPythonBootstrap) {
    if (Status wrote = write_file(files.python_path() + "/" + file.name, file.text); !wrote) return wrote.error();
  }
  return files;
}

WorkerFiles::~WorkerFiles() {
  if (!directory_.empty()) remove_tree(directory_, 0);
}

std::string WorkerFiles::error_file(int gen, int rank) const {
  return directory_ + "/error-g" + std::to_string(gen) + "-r" + std::to_string(rank) + ".json";
}

std::string WorkerFiles::flight_recorder_prefix(int gen) const {
  return directory_ + "/flight-recorder-g" + std::to_string(gen) + "-rank";
}

std::string prepend_python_path(const std::string& bootstrap, const std::string& inherited) {
  return inherited.empty() ? bootstrap : bootstrap + ":" + inherited;
}

std::optional<proto::WorkerErrorRecord> take_error_record(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO planted under that name must not block the agent's loop.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  ::unlink(path.c_str());
  if (!fd.valid()) return std::nullopt;
  struct stat info{};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) ||
      static_cast<uint64_t>(info.st_size) > max_bytes) {
    return std::nullopt;
  }
  std::string text;
  char buffer[8192];
  for (;;) {
    ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::nullopt;
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > max_bytes) return std::nullopt;  // it grew after the fstat
  }
  json file = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!file.is_object() || !file.contains("message")) return std::nullopt;
  const json& message = file["message"];
  std::string text_message;
  json extra = json::object();
  if (message.is_string()) {
    text_message = message.get<std::string>();
  } else if (message.is_object() && message.contains("message") && message["message"].is_string()) {
    text_message = message["message"].get<std::string>();
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) extra = message["extraInfo"];
  } else {
    return std::nullopt;
  }
  auto [type, rest] = split_type(text_message);
  proto::WorkerErrorRecord record;
  record.message = rest;
  record.type = type;
  if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
    record.traceback = extra["py_callstack"].get<std::string>();
  }
  if (extra.contains("timestamp")) {
    // torch writes str(int(time.time())); accept a number too.
    const json& stamp = extra["timestamp"];
    if (stamp.is_number_unsigned() || (stamp.is_number_integer() && stamp.get<int64_t>() >= 0)) {
      record.timestamp = stamp.get<int64_t>();
    } else if (stamp.is_string()) {
      const std::string& digits = stamp.get_ref<const std::string&>();
      if (!digits.empty() && digits.size() <= 12 &&
          digits.find_first_not_of("0123456789") == std::string::npos) {
        record.timestamp = std::stoll(digits);
      }
    }
  }
  return record;
}

}  // namespace dtrain::agent
