#include "launcher/proto/stack_fingerprint.h"

#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"

namespace dtrain::proto {

using nlohmann::json;

namespace {

constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxArgBytes = 64 << 10;
constexpr size_t kMaxEnvVars = 4096;
constexpr size_t kMaxPathBytes = 4096;
constexpr int64_t kMaxProbeTimeoutMs = 60'000;

void read_value(FieldReader& reader, const char* key, std::string& out) {
  if (auto value = reader.optional_string(key, kMaxStackValueBytes)) out = std::move(*value);
}

}  // namespace

json to_json(const StackProbeRequest& request) {
  json out = {{"argv", request.argv}};
  if (request.workdir) out["workdir"] = *request.workdir;
  out["env"] = request.env;
  out["timeout_ms"] = request.timeout_ms;
  return out;
}

json to_json(const StackFingerprint& fingerprint) {
  json files = json::array();
  for (const StackFile& file : fingerprint.files) files.push_back({{"path", file.path}, {"sha256", file.sha256}});
  json out = {{"os", fingerprint.os}, {"kernel", fingerprint.kernel}, {"gpu_driver", fingerprint.gpu_driver},
              {"cuda", fingerprint.cuda}, {"nccl", fingerprint.nccl}};
  put_optional(out, "python", fingerprint.python);
  put_optional(out, "torch", fingerprint.torch);
  put_optional(out, "python_nccl", fingerprint.python_nccl);
  put_optional(out, "python_cuda", fingerprint.python_cuda);
  out["image"] = fingerprint.image;
  out["files"] = std::move(files);
  out["ms"] = fingerprint.ms;
  out["notes"] = fingerprint.notes;
  return out;
}

Result<StackProbeRequest> parse_stack_probe_request(const json& object) {
  FieldReader reader("config.stack", object);
  StackProbeRequest request;
  request.argv = reader.string_array("argv", kMaxArgs, kMaxArgBytes);
  if (reader.ok() && request.argv.empty()) reader.fail_text("argv", "expected a non-empty array of strings");
  request.workdir = reader.optional_string("workdir", kMaxPathBytes);
  if (const json* env = reader.optional_object("env")) {
    if (env->size() > kMaxEnvVars) reader.fail_text("env", "more than " + std::to_string(kMaxEnvVars) + " variables");
    for (const auto& [name, value] : env->items()) {
      if (!reader.ok()) break;
      if (!value.is_string()) {
        reader.fail("env", "expected an object of strings, " + printable(name, 40) + " is not", value);
        break;
      }
      request.env.emplace(name, value.get<std::string>());
    }
  }
  request.timeout_ms = reader.optional_integer("timeout_ms", 1, kMaxProbeTimeoutMs).value_or(kDefaultStackProbeTimeoutMs);
  if (!reader.ok()) return reader.error();
  return request;
}

Result<StackFingerprint> parse_stack_fingerprint(const json& object) {
  FieldReader reader("hello.stack", object);
  StackFingerprint fingerprint;
  read_value(reader, "os", fingerprint.os);
  read_value(reader, "kernel", fingerprint.kernel);
  read_value(reader, "gpu_driver", fingerprint.gpu_driver);
  read_value(reader, "cuda", fingerprint.cuda);
  read_value(reader, "nccl", fingerprint.nccl);
  fingerprint.python = reader.optional_string("python", kMaxStackValueBytes);
  fingerprint.torch = reader.optional_string("torch", kMaxStackValueBytes);
  fingerprint.python_nccl = reader.optional_string("python_nccl", kMaxStackValueBytes);
  fingerprint.python_cuda = reader.optional_string("python_cuda", kMaxStackValueBytes);
  read_value(reader, "image", fingerprint.image);
  fingerprint.ms = reader.optional_integer("ms", 0).value_or(0);
  if (auto notes = reader.optional_string_array("notes", kMaxStackNotes, kMaxStackValueBytes)) {
    fingerprint.notes = std::move(*notes);
  }
  if (const json* files = reader.optional_array("files")) {
    if (files->size() > kMaxStackFiles) {
      reader.fail_text("files", "more than " + std::to_string(kMaxStackFiles) + " files");
    }
    for (size_t i = 0; reader.ok() && i < files->size(); ++i) {
      FieldReader file_reader("hello.stack.files[" + std::to_string(i) + "]", (*files)[i]);
      StackFile file;
      file.path = file_reader.string("path", kMaxPathBytes);
      file.sha256 = file_reader.string("sha256", kMaxStackValueBytes);
      if (!file_reader.ok()) return file_reader.error();
      fingerprint.files.push_back(std::move(file));
    }
  }
  if (!reader.ok()) return reader.error();
  return fingerprint;
}

std::vector<std::pair<std::string, std::string>> stack_items(const StackFingerprint& fingerprint) {
  std::vector<std::pair<std::string, std::string>> items{{"os", fingerprint.os},
                                                         {"kernel", fingerprint.kernel},
                                                         {"gpu driver", fingerprint.gpu_driver},
                                                         {"cuda", fingerprint.cuda},
                                                         {"nccl", fingerprint.nccl}};
  if (fingerprint.python) items.emplace_back("python", *fingerprint.python);
  if (fingerprint.torch) items.emplace_back("torch", *fingerprint.torch);
  if (fingerprint.python_nccl) items.emplace_back("nccl (python)", *fingerprint.python_nccl);
  if (fingerprint.python_cuda) items.emplace_back("cuda runtime (python)", *fingerprint.python_cuda);
  items.emplace_back("image", fingerprint.image);
  for (const StackFile& file : fingerprint.files) items.emplace_back("file " + file.path, file.sha256);
  return items;
}

}  // namespace dtrain::proto
