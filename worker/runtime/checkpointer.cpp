// Saving, committing and finding checkpoints (docs/architecture.md §3).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/runtime/checkpoint_files.h"

namespace dtrain::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t now_ms() {
  return std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<std::string> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"missing"};
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return Error{"unreadable"};
  return content.str();
}

// A manifest (and a KV note) is a file anyone could have edited: look fields up without
// nlohmann's throwing value()/get() or const operator[] (undefined on a missing key).
std::optional<int64_t> int_field(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto found = object.find(key);
  if (found == object.end() || !(found->is_number_integer() || found->is_number_unsigned())) return std::nullopt;
  return found->get<int64_t>();
}

std::string string_field(const json& object, const char* key, const std::string& fallback) {
  if (!object.is_object()) return fallback;
  auto found = object.find(key);
  if (found == object.end() || !found->is_string()) return fallback;
  return found->get<std::string>();
}

std::string shard_key(int64_t step, int tp, int pp) {
  return "ckpt/" + std::to_string(step) + "/tp" + std::to_string(tp) + "-pp" + std::to_string(pp);
}

// Shards are read through a buffer of this size, which stays in the L2 cache while it is
// checksummed: verifying a multi-gigabyte shard (prune does it on every save) needs no more
// memory than this, and the kernel copies into a small buffer it has already touched much faster
// than into a large fresh one on virtual machines (see kBounceBytes in checkpoint_files.cpp).
constexpr size_t kReadChunk = size_t{1} << 20;

/// Reads one shard and checks it against its header and, when given, the manifest's record;
/// `payload`, when given, receives the payload (restore), else only the CRC is computed (verify).
Status check_shard(const std::string& dir, int64_t step, int tp, int pp, const json* record, std::string* payload) {
  std::string name = ckpt::shard_name(tp, pp);
  std::ifstream in(ckpt::step_dir(dir, step) + "/" + name, std::ios::binary);
  if (!in) return Error{name + ": missing"};
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0 || !in) return Error{name + ": unreadable"};
  std::optional<int64_t> recorded_bytes = record != nullptr ? int_field(*record, "bytes") : std::nullopt;
  if (recorded_bytes && *recorded_bytes != size) {
    return Error{name + ": " + std::to_string(size) + " bytes, the manifest says " + std::to_string(*recorded_bytes) +
                 " (truncated or replaced)"};
  }
  std::string header_bytes(static_cast<size_t>(std::min<std::streamoff>(size, ckpt::kHeaderSize)), '\0');
  if (!in.read(header_bytes.data(), static_cast<std::streamsize>(header_bytes.size()))) {
    return Error{name + ": unreadable"};
  }
  Result<ckpt::ShardHeader> header = ckpt::decode_header(header_bytes);
  if (!header) return Error{name + ": " + header.error().message};
  if (header->step != step || header->tp_rank != tp || header->pp_rank != pp) {
    return Error{name + ": header says step " + std::to_string(header->step) + " tp" +
                 std::to_string(header->tp_rank) + " pp" + std::to_string(header->pp_rank) + " (misplaced file)"};
  }
  uint64_t payload_size = static_cast<uint64_t>(size) - ckpt::kHeaderSize;
  if (header->payload_size != payload_size) {
    return Error{name + ": payload is " + std::to_string(payload_size) + " bytes, the header says " +
                 std::to_string(header->payload_size) + " (truncated)"};
  }
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(payload_size, kReadChunk)));
  if (payload != nullptr) payload->resize(payload_size);
  uint32_t actual = 0;
  for (uint64_t done = 0; done < payload_size;) {
    size_t piece = static_cast<size_t>(std::min<uint64_t>(payload_size - done, kReadChunk));
    if (!in.read(buffer.data(), static_cast<std::streamsize>(piece))) {
      return Error{name + ": unreadable or truncated while reading (" + std::to_string(done + in.gcount()) + " of " +
                   std::to_string(payload_size) + " payload bytes)"};
    }
    actual = crc32c(buffer.data(), piece, actual);
    if (payload != nullptr) std::memcpy(payload->data() + done, buffer.data(), piece);
    done += piece;
  }
  if (actual != header->payload_crc) {
    return Error{name + ": CRC mismatch (header " + ckpt::hex32(header->payload_crc) + ", payload " +
                 ckpt::hex32(actual) + ")"};
  }
  if (record != nullptr && string_field(*record, "crc32c", "") != ckpt::hex32(actual)) {
    return Error{name + ": CRC " + ckpt::hex32(actual) + " differs from the manifest's " +
                 string_field(*record, "crc32c", "?") + " (a newer save overwrote it?)"};
  }
  return {};
}

Result<json> load_manifest(const std::string& dir, int64_t step) {
  Result<std::string> text = read_whole(ckpt::step_dir(dir, step) + "/" + ckpt::kManifestName);
  if (!text) return Error{"no MANIFEST.json (the save did not complete)"};
  json manifest = json::parse(*text, nullptr, false);
  std::optional<int64_t> tp_size = int_field(manifest, "tp_size");
  std::optional<int64_t> pp_size = int_field(manifest, "pp_size");
  std::optional<int64_t> recorded_step = int_field(manifest, "step");
  if (!manifest.is_object() || !manifest.contains("shards") || !manifest.at("shards").is_array() ||
      !recorded_step || !tp_size || !pp_size || *tp_size < 1 || *pp_size < 1 || *tp_size > 65536 ||
      *pp_size > 65536) {
    return Error{"MANIFEST.json is not a valid manifest (corrupt?)"};
  }
  if (*recorded_step != step) {
    return Error{"MANIFEST.json says step " + std::to_string(*recorded_step) + " in directory step-" +
                 std::to_string(step)};
  }
  return manifest;
}

const json* find_record(const json& manifest, int tp, int pp) {
  for (const json& record : manifest.at("shards")) {
    if (int_field(record, "tp") == tp && int_field(record, "pp") == pp) return &record;
  }
  return nullptr;
}

/// Keeps the newest `keep` steps that verify and deletes older ones (ckpt::prune). It reads back
/// every step it keeps and deletes whole shards (about 0.05 s and 0.11 s per 256 MiB shard on
/// the ext4 test VM), so Checkpointer runs it after save() has returned; the next save, wait()
/// and the destructor wait for it. Best effort: a failure leaves old steps behind, nothing worse.
void prune_quietly(const std::string& dir, int keep) {
  try {
    ckpt::prune(dir, keep);
  } catch (const std::exception& failure) {  // e.g. a directory that vanished mid-scan
    std::fprintf(stderr, "dtrain: pruning checkpoints in %s: %s (the old steps stay)\n", dir.c_str(), failure.what());
  }
}

}  // namespace

Status verify_checkpoint(const std::string& dir, int64_t step) {
  Result<json> manifest = load_manifest(dir, step);
  if (!manifest) return manifest.error();
  int tp_size = static_cast<int>(*int_field(*manifest, "tp_size"));  // checked by load_manifest
  int pp_size = static_cast<int>(*int_field(*manifest, "pp_size"));
  for (int tp = 0; tp < tp_size; ++tp) {
    for (int pp = 0; pp < pp_size; ++pp) {
      const json* record = find_record(*manifest, tp, pp);
      if (record == nullptr) return Error{"MANIFEST.json lists no " + ckpt::shard_name(tp, pp)};
      if (Status checked = check_shard(dir, step, tp, pp, record, nullptr); !checked) return checked;
    }
  }
  return {};
}

CheckpointScan latest_complete(const std::string& dir) {
  CheckpointScan scan;
  for (int64_t step : ckpt::list_steps(dir)) {
    if (Status verified = verify_checkpoint(dir, step); !verified) {
      scan.skipped.push_back({step, verified.error().message});
      continue;
    }
    scan.latest = step;
    break;
  }
  return scan;
}

Result<std::string> read_shard(const std::string& dir, int64_t step, int tp_rank, int pp_rank) {
  Result<json> manifest = load_manifest(dir, step);
  if (!manifest) return manifest.error();
  const json* record = find_record(*manifest, tp_rank, pp_rank);
  if (record == nullptr) return Error{"MANIFEST.json lists no " + ckpt::shard_name(tp_rank, pp_rank)};
  std::string payload;
  if (Status checked = check_shard(dir, step, tp_rank, pp_rank, record, &payload); !checked) return checked.error();
  return payload;
}

CheckpointOptions checkpoint_options(const Settings& settings) {
  CheckpointOptions options;
  options.dir = settings.ckpt_dir;
  options.keep = std::max(1, settings.ckpt_keep);
  options.fault_delay_ms = settings.fault_ckpt_delay_ms;
  options.file_mode = settings.ckpt_file_mode;
  return options;
}

struct Checkpointer::Background {
  std::future<Status> pending;  ///< an asynchronous save, pruning included
  /// What follows a synchronous save, off the caller's path: freeing its snapshot and pruning.
  std::future<void> behind;
};

Checkpointer::Checkpointer(Worker& worker, CheckpointOptions options)
    : worker_(worker), options_(std::move(options)), background_(std::make_unique<Background>()) {
  options_.keep = std::max(1, options_.keep);
}

Checkpointer::~Checkpointer() { (void)wait(); }

Status Checkpointer::wait() {
  Status outcome;
  if (background_->pending.valid()) outcome = background_->pending.get();
  if (background_->behind.valid()) background_->behind.get();
  return outcome;
}

Status Checkpointer::save(int64_t step, std::string payload) {
  if (options_.dir.empty()) return Error{"checkpoint: no directory (DTRAIN_CKPT_DIR is unset)"};
  if (Status previous = wait(); !previous) return previous;
  // Only the committing rank prunes, and only after a commit.
  bool prunes = worker_.topology().rank == 0;
  if (!options_.async) {
    // A synchronous save may outlast heartbeat.hang_timeout (slow storage, a big model): say so.
    worker_.set_checkpoint_phase(true);
    Status saved = save_now(step, payload);
    worker_.set_checkpoint_phase(false);
    bool committed = saved.ok() && prunes;
    try {
      background_->behind = std::async(std::launch::async, [dir = options_.dir, keep = options_.keep, committed,
                                                             snapshot = std::move(payload)]() mutable {
        std::string().swap(snapshot);
        if (committed) prune_quietly(dir, keep);
      });
    } catch (const std::system_error&) {
      if (committed) prune_quietly(options_.dir, options_.keep);  // no thread to be had: costs only time
    }
    return saved;
  }
  background_->pending = std::async(std::launch::async, [this, step, prunes, snapshot = std::move(payload)]() mutable {
    Status saved = save_now(step, snapshot);
    // Freed here: left in the lambda, it would be freed by whoever drops the future, i.e. the
    // training thread in its next save() (unmapping a 25 MB state took up to 17 ms there).
    std::string().swap(snapshot);
    if (saved.ok() && prunes) prune_quietly(options_.dir, options_.keep);
    return saved;
  });
  return {};
}

Status Checkpointer::save_now(int64_t step, const std::string& payload) {
  const Topology& topology = worker_.topology();
  int64_t started = now_ms();
  if (options_.fault_delay_ms > 0) std::this_thread::sleep_for(Millis(options_.fault_delay_ms));
  std::string where = "checkpoint step-" + std::to_string(step);
  // One data-parallel replica writes each (tp, pp) shard; the writers are spread over the
  // replicas (shard k by replica k mod data), so a save's bytes leave from as many hosts as the
  // layout allows instead of all from replica 0's.
  int shard_index = topology.tp_rank * topology.pp_size + topology.pp_rank;
  if (topology.dp_rank == shard_index % std::max(1, topology.dp_size)) {
    ckpt::ShardHeader header;
    header.step = step;
    header.generation = worker_.settings().generation;
    header.tp_rank = topology.tp_rank;
    header.pp_rank = topology.pp_rank;
    Result<ckpt::ShardRecord> record = ckpt::write_shard(options_.dir, header, payload, options_.file_mode);
    json note = record ? json{{"bytes", record->bytes}, {"crc32c", ckpt::hex32(record->payload_crc)}}
                       : json{{"error", record.error().message}};
    // Publish even a failure, so that rank 0 reports it instead of waiting out its timeout.
    Status published = worker_.kv().set(shard_key(step, topology.tp_rank, topology.pp_rank), note.dump());
    if (!record) return Error{where + ": " + record.error().message};
    if (!published) return Error{where + ": not committed: " + published.error().message};
  }
  if (topology.rank != 0) return {};
  return commit_manifest(step, started);
}

Status Checkpointer::commit_manifest(int64_t step, int64_t started_ms) {
  const Topology& topology = worker_.topology();
  std::string where = "checkpoint step-" + std::to_string(step);
  std::vector<std::string> keys;
  for (int tp = 0; tp < topology.tp_size; ++tp) {
    for (int pp = 0; pp < topology.pp_size; ++pp) keys.push_back(shard_key(step, tp, pp));
  }
  Result<std::vector<std::string>> notes =
      worker_.kv().wait(keys, options_.handshake_timeout + Millis(options_.fault_delay_ms));
  if (!notes) return Error{where + ": not committed: " + notes.error().message};
  std::vector<ckpt::ShardRecord> shards;
  int64_t total_bytes = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    json note = json::parse((*notes)[i], nullptr, false);
    int tp = static_cast<int>(i) / topology.pp_size;
    int pp = static_cast<int>(i) % topology.pp_size;
    std::optional<int64_t> bytes = int_field(note, "bytes");
    std::string crc_text = string_field(note, "crc32c", "");
    char* crc_end = nullptr;
    unsigned long crc = std::strtoul(crc_text.c_str(), &crc_end, 16);
    if (!note.is_object() || note.contains("error") || !bytes || crc_text.empty() || *crc_end != '\0') {
      return Error{where + ": not committed: the writer of " + ckpt::shard_name(tp, pp) + " failed: " +
                   string_field(note, "error", (*notes)[i])};
    }
    shards.push_back({tp, pp, *bytes, static_cast<uint32_t>(crc)});
    total_bytes += *bytes;
  }
  Result<bool> current = worker_.kv().generation_is_current();
  if (!current || !*current) {
    std::string why = current ? "generation " + std::to_string(worker_.settings().generation) +
                                    " is no longer current (a newer generation started)"
                              : current.error().message;
    std::fprintf(stderr, "dtrain: %s not committed: %s; no MANIFEST.json written\n", where.c_str(), why.c_str());
    return Error{where + ": not committed: " + why};
  }
  if (Status written = ckpt::write_manifest(options_.dir, step, worker_.settings().generation, topology, shards,
                                               options_.file_mode);
      !written) {
    return Error{where + ": " + written.error().message};
  }
  worker_.report_checkpoint_committed(step, total_bytes, now_ms() - started_ms);
  return {};
}

Result<std::optional<Checkpointer::Restored>> Checkpointer::restore(int64_t resume_step) {
  const Topology& topology = worker_.topology();
  if (options_.dir.empty()) return std::optional<Restored>();
  int64_t step = resume_step;
  if (resume_step >= 0) {
    if (Status verified = verify_checkpoint(options_.dir, resume_step); !verified) {
      // The step the supervisor named is damaged (bad disk, corrupt-checkpoint drill): refuse it
      // with an event and fall back to the newest older step that verifies. Every rank reads the
      // same files, so every rank makes the same choice.
      std::fprintf(stderr, "dtrain: checkpoint step-%lld rejected: %s\n", static_cast<long long>(resume_step),
                   verified.error().message.c_str());
      if (topology.rank == 0) worker_.report_checkpoint_rejected(resume_step, verified.error().message);
      step = -1;
      for (int64_t older : ckpt::list_steps(options_.dir)) {
        if (older >= resume_step) continue;
        if (Status ok = verify_checkpoint(options_.dir, older); !ok) {
          if (topology.rank == 0) worker_.report_checkpoint_rejected(older, ok.error().message);
          continue;
        }
        step = older;
        break;
      }
      if (step < 0) return std::optional<Restored>();
    }
  } else {
    CheckpointScan scan = latest_complete(options_.dir);
    for (const SkippedCheckpoint& skipped : scan.skipped) {
      std::fprintf(stderr, "dtrain: checkpoint step-%lld rejected: %s\n", static_cast<long long>(skipped.step),
                   skipped.reason.c_str());
      if (topology.rank == 0) worker_.report_checkpoint_rejected(skipped.step, skipped.reason);
    }
    if (!scan.latest) return std::optional<Restored>();
    step = *scan.latest;
  }
  Result<std::string> payload = read_shard(options_.dir, step, topology.tp_rank, topology.pp_rank);
  if (!payload) {
    return Error{"checkpoint step-" + std::to_string(step) + " in '" + options_.dir + "': " + payload.error().message};
  }
  return std::optional<Restored>(Restored{step, std::move(*payload)});
}

}  // namespace dtrain::worker
