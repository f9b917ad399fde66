#include "launcher/agent/stack_probe.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "launcher/agent/worker_process.h"
#include "launcher/base/child_process.h"
#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"

namespace dtrain::agent {

namespace {

constexpr const char* kUnknown = "unknown";
constexpr const char* kNone = "none";
constexpr size_t kMaxSmallFileBytes = 64 << 10;

/// A value an agent may send: printable, at most kMaxStackValueBytes.
std::string bounded(std::string_view text) { return printable(trim(text), proto::kMaxStackValueBytes - 16); }

std::string unknown_because(const std::string& why) { return std::string(kUnknown) + " (" + bounded(why) + ")"; }

void note(proto::StackFingerprint& fingerprint, const std::string& text) {
  if (fingerprint.notes.size() < proto::kMaxStackNotes) fingerprint.notes.push_back(bounded(text));
}

std::optional<std::string> small_file(const std::string& path) {
  Result<std::string> text = read_regular_file(path, kMaxSmallFileBytes, FollowLinks::kYes);
  if (!text) return std::nullopt;
  return std::move(*text);
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

// ---- the file system as command_files sees it --------------------------------------------------

std::string resolve_program(const std::string& name, const std::string& search_path) {
  if (name.find('/') != std::string::npos) return name;
  for (const std::string& directory : split(search_path, ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

std::string first_line(const std::string& path) {
  Result<UniqueFd> fd = open_regular_file(path, FollowLinks::kYes);
  if (!fd) return "";
  char buffer[256];
  ssize_t count = ::read(fd->get(), buffer, sizeof buffer);
  if (count <= 0) return "";
  std::string text(buffer, static_cast<size_t>(count));
  return text.substr(0, text.find('\n'));
}

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// ---- hashing -----------------------------------------------------------------------------------

struct DigestContext {
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  ~DigestContext() { EVP_MD_CTX_free(context); }
};

/// sha256 of the file, hex, or "unknown (why)"; gives up at `deadline_ms` (monotonic).
std::string sha256_of_file(const std::string& path, int64_t deadline_ms, const SystemClock& clock) {
  Result<UniqueFd> fd = open_regular_file(path, FollowLinks::kYes);
  if (!fd) return unknown_because(fd.error().message);
  struct stat info {};
  if (::fstat(fd->get(), &info) != 0) return unknown_because("fstat failed");
  if (info.st_size > kMaxHashedFileBytes) {
    return unknown_because("larger than " + describe_bytes(static_cast<unsigned long long>(kMaxHashedFileBytes)) +
                           ": not hashed");
  }
  DigestContext digest;
  if (!digest.context || EVP_DigestInit_ex(digest.context, EVP_sha256(), nullptr) != 1) return unknown_because("no sha256");
  std::vector<char> buffer(1 << 20);
  for (;;) {
    if (clock.monotonic_ms() > deadline_ms) return unknown_because("hashing took too long");
    ssize_t count = ::read(fd->get(), buffer.data(), buffer.size());
    if (count < 0) return unknown_because("read failed");
    if (count == 0) break;
    EVP_DigestUpdate(digest.context, buffer.data(), static_cast<size_t>(count));
  }
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(digest.context, bytes, &length) != 1) return unknown_because("no sha256");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[bytes[i] >> 4];
    hex += kHex[bytes[i] & 15];
  }
  return hex;
}

// ---- what the host has -------------------------------------------------------------------------

std::string os_name() {
  std::optional<std::string> text = small_file("/etc/os-release");
  if (!text) text = small_file("/usr/lib/os-release");
  std::string name = text ? os_release_name(*text) : "";
  return name.empty() ? unknown_because("no /etc/os-release") : bounded(name);
}

std::string kernel_release() {
  utsname names{};
  return ::uname(&names) == 0 ? bounded(names.release) : std::string(kUnknown);
}

std::string gpu_driver() {
  if (std::optional<std::string> version = small_file("/sys/module/nvidia/version")) {
    if (!trim(*version).empty()) return bounded(*version);
  }
  if (std::optional<std::string> text = small_file("/proc/driver/nvidia/version")) {
    std::string version = nvidia_driver_from_proc(*text);
    return version.empty() ? unknown_because("/proc/driver/nvidia/version names no version") : bounded(version);
  }
  return kNone;
}

/// The library directories the loader would search for the worker, in its order.
std::vector<std::string> library_directories(const std::map<std::string, std::string>& env,
                                             const std::string& cuda_home) {
  std::vector<std::string> directories;
  if (auto path = env.find("LD_LIBRARY_PATH"); path != env.end()) {
    for (const std::string& directory : split(path->second, ':')) {
      if (!directory.empty()) directories.push_back(directory);
    }
  }
  utsname names{};
  std::string multiarch = ::uname(&names) == 0 ? std::string(names.machine) + "-linux-gnu" : "x86_64-linux-gnu";
  for (const std::string& directory : {cuda_home + "/lib64", cuda_home + "/lib", "/usr/lib/" + multiarch,
                                       "/lib/" + multiarch, std::string("/usr/lib64"), std::string("/usr/local/lib"),
                                       std::string("/usr/lib")}) {
    directories.push_back(directory);
  }
  return directories;
}

/// The version of the first `stem`<version> library in `directories`, or "".
std::string find_library_version(const std::vector<std::string>& directories, const std::string& stem) {
  for (const std::string& directory : directories) {
    std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(directory.c_str()), &::closedir);
    if (!listing) continue;
    std::string best;
    while (dirent* entry = ::readdir(listing.get())) {
      std::string version = library_version(entry->d_name, stem);
      if (version.size() > best.size()) best = version;  // libx.so.2.21.5 over libx.so.2
    }
    if (!best.empty()) return bounded(best);
  }
  return "";
}

std::string cuda_version(const std::string& cuda_home, const std::vector<std::string>& directories) {
  if (std::optional<std::string> text = small_file(cuda_home + "/version.json")) {
    std::string version = cuda_version_from_json(*text);
    if (!version.empty()) return bounded(version);
  }
  if (std::optional<std::string> text = small_file(cuda_home + "/version.txt")) {
    size_t at = text->find("Version ");
    if (at != std::string::npos) return bounded(trim(text->substr(at + 8, 32)));
  }
  std::string runtime = find_library_version(directories, "libcudart.so.");
  return runtime.empty() ? kNone : runtime;
}

std::string image_digest(const std::map<std::string, std::string>& env) {
  ImageFacts facts;
  if (auto given = env.find("DTRAIN_IMAGE_DIGEST"); given != env.end() && !given->second.empty()) {
    facts.digest_variable = given->second;
  } else if (const char* own = std::getenv("DTRAIN_IMAGE_DIGEST"); own && *own) {
    facts.digest_variable = own;
  }
  if (exists("/run/.containerenv")) facts.containerenv = small_file("/run/.containerenv").value_or("");
  facts.dockerenv = exists("/.dockerenv");
  facts.kubernetes = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr;
  return image_of(facts);
}

/// Runs the interpreter's probe and fills python, torch, python_nccl, python_cuda.
void probe_python(const std::string& python, const proto::StackProbeRequest& request,
                  const std::map<std::string, std::string>& env, proto::StackFingerprint& fingerprint) {
  PipedChild::Options options;
  options.own_process_group = true;  // what it starts is killed with it
  options.kill_with_parent = true;
  std::vector<std::string> environment;
  for (const auto& [name, value] : env) environment.push_back(name + "=" + value);
  options.environment = std::move(environment);
  options.working_directory = request.workdir.value_or("");
  // -S: no site initialisation, so nothing of the user's runs in the probe (a sitecustomize or
  // .pth that forks a daemon would hold the probe's pipe open past its kill, and the hello that
  // carries the fingerprint with it); the script adds the site directories itself.
  Result<CommandOutput> ran = run_command({python, "-S", "-c", python_probe_script()}, Millis(request.timeout_ms), options,
                                          kMaxPythonProbeOutputBytes);
  std::string why;
  if (!ran) {
    why = ran.error().message;
  } else if (ran->exit_code != 0) {
    why = python + " exited with " + std::to_string(ran->exit_code) + ": " + printable(trim(ran->err), 200);
  } else if (!apply_python_probe_output(ran->out, fingerprint)) {
    why = python + " printed no versions";
  }
  if (why.empty()) return;
  note(fingerprint, "python: " + why);
  std::string unknown = unknown_because(why.size() > 120 ? why.substr(0, 120) + "..." : why);
  fingerprint.python = fingerprint.torch = unknown;
  fingerprint.python_nccl = fingerprint.python_cuda = std::string(kUnknown);
}

}  // namespace

proto::StackFingerprint probe_stack(const proto::StackProbeRequest& request) {
  SystemClock clock;
  const int64_t started_ms = clock.monotonic_ms();
  proto::StackFingerprint fingerprint;
  fingerprint.os = os_name();
  fingerprint.kernel = kernel_release();
  fingerprint.gpu_driver = gpu_driver();
  std::map<std::string, std::string> env = worker_environment(request.env);
  std::string cuda_home = "/usr/local/cuda";
  if (auto home = env.find("CUDA_HOME"); home != env.end() && !home->second.empty()) cuda_home = home->second;
  std::vector<std::string> directories = library_directories(env, cuda_home);
  fingerprint.cuda = cuda_version(cuda_home, directories);
  std::string nccl = find_library_version(directories, "libnccl.so.");
  fingerprint.nccl = nccl.empty() ? kNone : nccl;
  fingerprint.image = image_digest(env);

  CommandFiles command = command_files(request.argv, request.workdir.value_or(""), env["PATH"],
                                       {&resolve_program, &first_line, &is_file});
  const int64_t hash_deadline_ms = clock.monotonic_ms() + kHashBudgetMs;
  for (const CommandFiles::File& file : command.files) {
    if (fingerprint.files.size() == proto::kMaxStackFiles) {
      note(fingerprint, "files: only the first " + std::to_string(proto::kMaxStackFiles) + " are hashed");
      break;
    }
    std::string digest = file.path.empty() ? "missing" : sha256_of_file(file.path, hash_deadline_ms, clock);
    fingerprint.files.push_back({printable(file.name, 1024), digest});
  }
  if (command.python) probe_python(*command.python, request, env, fingerprint);
  fingerprint.ms = clock.monotonic_ms() - started_ms;
  return fingerprint;
}

int run_stack_probe(const std::string& request_json) {
  nlohmann::json parsed = nlohmann::json::parse(request_json, nullptr, false);
  Result<proto::StackProbeRequest> request = proto::parse_stack_probe_request(parsed);
  if (!request) {
    std::fprintf(stderr, "dtrain agent --stack-probe: %s\n", request.error().message.c_str());
    return 2;
  }
  std::printf("%s\n", json_compact(proto::to_json(probe_stack(*request))).c_str());
  return 0;
}

// ---- the pure parts ------------------------------------------------------------------------------

bool is_python_name(const std::string& path) {
  std::string name = path.substr(path.rfind('/') + 1);
  if (!starts_with(name, "python")) return false;
  return name.find_first_not_of("0123456789.", 6) == std::string::npos;
}

CommandFiles command_files(const std::vector<std::string>& argv, const std::string& workdir,
                           const std::string& search_path, const CommandFileSystem& fs) {
  CommandFiles out;
  if (argv.empty()) return out;
  auto in_workdir = [&](const std::string& path) {
    return path.empty() || path[0] == '/' || workdir.empty() ? path : workdir + "/" + path;
  };
  std::string program = fs.resolve_program(argv[0], search_path);
  if (!program.empty()) program = in_workdir(program);
  if (!program.empty() && is_python_name(program)) {
    out.python = program;  // the interpreter's version is an item of its own; its file is not
  } else {
    out.files.push_back({argv[0], program});
    // A script run through its shebang: `#!/usr/bin/env python3` or `#!/usr/bin/python3 -u`.
    std::string shebang = program.empty() ? "" : fs.first_line(program);
    if (starts_with(shebang, "#!")) {
      std::vector<std::string> words;
      for (const std::string& word : split(std::string(trim(shebang.substr(2))), ' ')) {
        if (!word.empty()) words.push_back(word);
      }
      size_t at = !words.empty() && words[0].substr(words[0].rfind('/') + 1) == "env" ? 1 : 0;
      while (at < words.size() && starts_with(words[at], "-")) ++at;  // env -S
      if (at < words.size() && is_python_name(words[at])) {
        std::string interpreter = at == 0 ? words[at] : fs.resolve_program(words[at], search_path);
        if (!interpreter.empty()) out.python = interpreter;
      }
    }
  }
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& argument = argv[i];
    if (argument == "-c") break;  // the rest is a program text and its arguments
    if (argument.empty() || argument[0] == '-') continue;
    if (fs.is_file(in_workdir(argument))) out.files.push_back({argument, in_workdir(argument)});
  }
  return out;
}

std::string os_release_name(const std::string& text) {
  for (const std::string& line : split(text, '\n')) {
    if (!starts_with(line, "PRETTY_NAME=")) continue;
    std::string value(trim(line.substr(12)));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    return value;
  }
  return "";
}

std::string nvidia_driver_from_proc(const std::string& text) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
  size_t at = text.find("Kernel Module");
  if (at == std::string::npos) return "";
  std::string rest(trim(text.substr(at + 13)));
  std::string version = rest.substr(0, rest.find_first_of(" \t\n"));
  return version.find_first_not_of("0123456789.") == std::string::npos ? version : "";
}

std::string cuda_version_from_json(const std::string& text) {
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
  const nlohmann::json* cuda = json_member(parsed, "cuda");
  return cuda ? json_string(*cuda, "version") : "";
}

std::string library_version(const std::string& file_name, const std::string& stem) {
  if (!starts_with(file_name, stem) || file_name.size() == stem.size()) return "";
  std::string version = file_name.substr(stem.size());
  if (version.find_first_not_of("0123456789.") != std::string::npos) return "";
  // Only a full version (libnccl.so.2.21.5): a bare major (libnccl.so.2) is a link to it.
  return std::count(version.begin(), version.end(), '.') >= 1 ? version : "";
}

bool apply_python_probe_output(const std::string& output, proto::StackFingerprint& fingerprint) {
  bool python_seen = false;
  for (const std::string& line : split(output, '\n')) {
    if (!starts_with(line, "DTRAIN_STACK ")) continue;  // a sitecustomize may print too
    std::string pair = line.substr(13);
    size_t equals = pair.find('=');
    if (equals == std::string::npos) continue;
    std::string key = pair.substr(0, equals);
    std::string value = bounded(pair.substr(equals + 1));
    if (value.empty()) value = kUnknown;
    if (key == "python") {
      fingerprint.python = value;
      python_seen = true;
    } else if (key == "torch") {
      fingerprint.torch = value;
    } else if (key == "nccl") {
      fingerprint.python_nccl = value;
    } else if (key == "cuda") {
      fingerprint.python_cuda = value;
    }
  }
  return python_seen;
}

std::string image_of(const ImageFacts& facts) {
  if (facts.digest_variable && !facts.digest_variable->empty()) return bounded(*facts.digest_variable);
  if (facts.containerenv) {
    for (const std::string& line : split(*facts.containerenv, '\n')) {
      if (!starts_with(line, "imageid=")) continue;
      std::string id(trim(line.substr(8)));
      if (id.size() >= 2 && id.front() == '"' && id.back() == '"') id = id.substr(1, id.size() - 2);
      if (!id.empty()) return bounded(id);
    }
  }
  if (facts.containerenv || facts.dockerenv || facts.kubernetes) {
    return unknown_because("in a container that does not say its image; set DTRAIN_IMAGE_DIGEST");
  }
  return kNone;
}

const char* python_probe_script() {
  // The same search importlib.metadata makes (the first dist-info or egg-info along sys.path),
  // without importing it (its import alone is ~80 ms) or anything it finds.
  return R"PY(import os, sys
def version_of(entry, name, suffix):
    version = name[:-len(suffix)].partition('-')[2].split('-py')[0]
    if version:
        return version
    path = os.path.join(entry, name)
    meta = os.path.join(path, 'METADATA' if suffix == '.dist-info' else 'PKG-INFO') if os.path.isdir(path) else path
    try:
        with open(meta, errors='replace') as f:
            for line in f.read(65536).splitlines():
                if line.startswith('Version:'):
                    return line[8:].strip()
    except OSError:
        pass
    return 'unknown'
import site  # under -S, importing site runs no sitecustomize, usercustomize or .pth file
for extra in site.getsitepackages() + [site.getusersitepackages()]:
    if extra not in sys.path:
        sys.path.append(extra)
found = {}
for entry in sys.path:
    try:
        names = os.listdir(entry or '.')
    except OSError:
        continue
    for name in names:
        for suffix in ('.dist-info', '.egg-info'):
            if not name.endswith(suffix):
                continue
            dist = name[:-len(suffix)].partition('-')[0].lower().replace('-', '_').replace('.', '_')
            key = 'torch' if dist == 'torch' else 'nccl' if dist.startswith('nvidia_nccl_cu') else 'cuda' if dist.startswith('nvidia_cuda_runtime_cu') else None
            if key and key not in found:
                found[key] = version_of(entry or '.', name, suffix)
print('DTRAIN_STACK python=%d.%d.%d' % tuple(sys.version_info[:3]))
for key in ('torch', 'nccl', 'cuda'):
    print('DTRAIN_STACK %s=%s' % (key, found.get(key, 'none')))
)PY";
}

}  // namespace dtrain::agent
