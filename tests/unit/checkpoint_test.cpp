#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/unit/file_size_limit.h"
#include "worker/runtime/checkpoint_files.h"
#include "worker/runtime/crc32c.h"
#include "worker/runtime/worker.h"

using namespace dtrain::worker;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  std::string path;
  ScratchDir() {
    char pattern[] = "/tmp/dtrain-ckpt-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string shard_path(const std::string& dir, int64_t step, int tp = 0, int pp = 0) {
  return dir + "/step-" + std::to_string(step) + "/shard-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + ".bin";
}

void flip_byte(const std::string& path, std::streamoff at_from_end) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-at_from_end, std::ios::end);
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x40;
  file.seekp(-at_from_end, std::ios::end);
  file.write(&byte, 1);
}

/// A one-rank worker with an in-process store, saving every step it is asked to.
Status save_steps(const std::string& dir, std::initializer_list<int64_t> steps, int keep = 3) {
  Settings settings;
  settings.generation = 1;
  auto worker = Worker::standalone(settings);
  CheckpointOptions options;
  options.dir = dir;
  options.keep = keep;
  Checkpointer checkpointer(*worker, options);
  for (int64_t step : steps) {
    if (Status saved = checkpointer.save(step, "state at step " + std::to_string(step)); !saved) return saved;
  }
  return {};
}

}  // namespace

TEST_CASE("checkpoint: a saved step has its shard and manifest, restores its payload and is latest") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {10, 20}).ok());
  CHECK(fs::exists(scratch.path + "/step-20/MANIFEST.json"));
  CHECK(fs::file_size(shard_path(scratch.path, 20)) == 56 + std::string("state at step 20").size());
  CheckpointScan scan = latest_complete(scratch.path);
  REQUIRE(scan.latest.has_value());
  CHECK(*scan.latest == 20);
  CHECK(scan.skipped.empty());
  CHECK(read_shard(scratch.path, 10, 0, 0).value() == "state at step 10");
  CHECK(verify_checkpoint(scratch.path, 20).ok());

  auto worker = Worker::standalone();
  Checkpointer checkpointer(*worker, {scratch.path});
  auto restored = checkpointer.restore(-1);
  REQUIRE(restored.ok());
  REQUIRE(restored->has_value());
  CHECK((*restored)->step == 20);
  CHECK((*restored)->payload == "state at step 20");
  auto exact = checkpointer.restore(10);
  REQUIRE(exact.ok());
  CHECK((*exact)->payload == "state at step 10");
}

TEST_CASE("checkpoint: the committing rank reports ckpt.committed with step, bytes and ms") {
  ScratchDir scratch;
  auto worker = Worker::standalone();
  Checkpointer checkpointer(*worker, {scratch.path});
  REQUIRE(checkpointer.save(7, "abc").ok());
  bool found = false;
  for (const std::string& line : worker->sent_lines()) {
    if (contains(line, "\"ckpt.committed\"")) {
      found = true;
      CHECK(contains(line, "\"step\":7"));
      CHECK(contains(line, "\"bytes\":59"));
      CHECK(contains(line, "\"ms\":"));
    }
  }
  CHECK(found);
}

TEST_CASE("checkpoint: a synchronous save is framed by checkpoint and train phase beats with the newest step") {
  ScratchDir scratch;
  auto worker = Worker::standalone();
  Metrics metrics;
  metrics.loss = 0.25;
  worker->beat(6, metrics);
  worker->beat(7, metrics);  // rate-limited: unsent until the save flushes it
  Checkpointer checkpointer(*worker, {scratch.path});
  REQUIRE(checkpointer.save(7, "abc").ok());
  std::vector<std::string> kinds;
  for (const std::string& line : worker->sent_lines()) {
    if (contains(line, "\"phase\":\"checkpoint\"")) {
      CHECK(contains(line, "\"step\":7"));
      CHECK(contains(line, "\"loss\":0.25"));  // the unsent beat's metrics went out with it
      kinds.push_back("enter");
    } else if (contains(line, "\"phase\":\"train\"")) {
      CHECK(contains(line, "\"step\":7"));
      kinds.push_back("leave");
    } else if (contains(line, "\"ckpt.committed\"")) {
      kinds.push_back("committed");
    }
  }
  CHECK(kinds == std::vector<std::string>{"enter", "committed", "leave"});
}

TEST_CASE("checkpoint: no phase beat before the first step beat (nothing to watch yet)") {
  ScratchDir scratch;
  auto worker = Worker::standalone();
  Checkpointer checkpointer(*worker, {scratch.path});
  REQUIRE(checkpointer.save(1, "abc").ok());
  for (const std::string& line : worker->sent_lines()) CHECK_FALSE(contains(line, "\"phase\""));
}

TEST_CASE("checkpoint: discovery skips a flipped byte, a truncated shard and a missing manifest, saying why") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {10, 20, 30, 40}, 10).ok());
  flip_byte(shard_path(scratch.path, 40), 3);                 // payload byte
  fs::resize_file(shard_path(scratch.path, 30), 60);          // truncated
  fs::remove(scratch.path + "/step-20/MANIFEST.json");        // incomplete save

  CheckpointScan scan = latest_complete(scratch.path);
  REQUIRE(scan.latest.has_value());
  CHECK(*scan.latest == 10);
  REQUIRE(scan.skipped.size() == 3);
  CHECK(scan.skipped[0].step == 40);
  CHECK(contains(scan.skipped[0].reason, "shard-tp0-pp0.bin: CRC mismatch"));
  CHECK(scan.skipped[1].step == 30);
  CHECK(contains(scan.skipped[1].reason, "shard-tp0-pp0.bin"));
  CHECK(contains(scan.skipped[1].reason, "truncated"));
  CHECK(scan.skipped[2].step == 20);
  CHECK(contains(scan.skipped[2].reason, "no MANIFEST.json"));

  // restore(-1) reports each rejected step on the wire for checkpoint.rejected events.
  auto worker = Worker::standalone();
  Checkpointer checkpointer(*worker, {scratch.path});
  auto restored = checkpointer.restore(-1);
  REQUIRE(restored.ok());
  CHECK((*restored)->step == 10);
  int rejected = 0;
  for (const std::string& line : worker->sent_lines()) {
    if (contains(line, "\"ckpt.rejected\"")) ++rejected;
  }
  CHECK(rejected == 3);
  // A broken step named by the supervisor (DTRAIN_RESUME_STEP) is rejected on the wire and the
  // newest older step that verifies is used instead, the same choice on every rank.
  size_t lines_before = worker->sent_lines().size();
  auto exact = checkpointer.restore(40);
  REQUIRE(exact.ok());
  REQUIRE(exact->has_value());
  CHECK((*exact)->step == 10);
  bool named = false;
  const std::vector<std::string> sent = worker->sent_lines();  // a copy: hold it while reading
  for (size_t i = lines_before; i < sent.size(); ++i) {
    const std::string& line = sent[i];
    if (contains(line, "\"ckpt.rejected\"") && contains(line, "\"step\":40") && contains(line, "CRC mismatch")) {
      named = true;
    }
  }
  CHECK(named);
}

TEST_CASE("checkpoint: a corrupt header and a corrupt manifest are rejected too") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {1, 2}).ok());
  {
    std::fstream file(shard_path(scratch.path, 2), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(20);
    file.put('\x7f');
  }
  CHECK(contains(verify_checkpoint(scratch.path, 2).error().message, "header CRC mismatch"));
  std::ofstream(scratch.path + "/step-1/MANIFEST.json") << "{ not json";
  CheckpointScan scan = latest_complete(scratch.path);
  CHECK_FALSE(scan.latest.has_value());
  REQUIRE(scan.skipped.size() == 2);
  CHECK(contains(scan.skipped[1].reason, "MANIFEST.json is not a valid manifest"));
}

TEST_CASE("checkpoint: no directory or an empty one means nothing to resume") {
  ScratchDir scratch;
  CHECK_FALSE(latest_complete(scratch.path + "/absent").latest.has_value());
  CHECK_FALSE(latest_complete(scratch.path).latest.has_value());
  auto worker = Worker::standalone();
  Checkpointer checkpointer(*worker, {scratch.path + "/absent"});
  auto restored = checkpointer.restore(-1);
  REQUIRE(restored.ok());
  CHECK_FALSE(restored->has_value());
}

TEST_CASE("checkpoint: only the newest `keep` complete steps stay") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {10, 20, 30, 40, 50}, 3).ok());
  CHECK_FALSE(fs::exists(scratch.path + "/step-10"));
  CHECK_FALSE(fs::exists(scratch.path + "/step-20"));
  CHECK(fs::exists(scratch.path + "/step-30/MANIFEST.json"));
  CHECK(fs::exists(scratch.path + "/step-50/MANIFEST.json"));
  int entries = 0;
  for ([[maybe_unused]] auto& entry : fs::directory_iterator(scratch.path)) ++entries;
  CHECK(entries == 3);  // no temp or half-deleted leftovers
}

TEST_CASE("checkpoint: prune counts only steps that verify — a corrupt newest step with keep 1 keeps the last good one") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {10, 20}, 3).ok());
  flip_byte(shard_path(scratch.path, 20), 3);  // step 20 has its manifest but does not verify
  REQUIRE(fs::exists(scratch.path + "/step-20/MANIFEST.json"));

  ckpt::prune(scratch.path, 1);
  CHECK(verify_checkpoint(scratch.path, 10).ok());  // the only good one is still there
  CHECK(fs::exists(scratch.path + "/step-20"));     // the bad one stays too, for resume to report
  CHECK(*latest_complete(scratch.path).latest == 10);

  // A manifest that is not JSON, or lists no shards, does not count either.
  REQUIRE(save_steps(scratch.path, {30}, 3).ok());
  std::ofstream(scratch.path + "/step-30/MANIFEST.json") << "{\"step\":30,\"tp_size\":\"1\"}";
  ckpt::prune(scratch.path, 1);
  CHECK(fs::exists(scratch.path + "/step-10/MANIFEST.json"));

  // A newer step that verifies takes the place of the last good one; then older ones go.
  REQUIRE(save_steps(scratch.path, {40}, 1).ok());
  CHECK(verify_checkpoint(scratch.path, 40).ok());
  CHECK_FALSE(fs::exists(scratch.path + "/step-30"));
  CHECK_FALSE(fs::exists(scratch.path + "/step-20"));
  CHECK_FALSE(fs::exists(scratch.path + "/step-10"));
}

TEST_CASE("checkpoint: a manifest with wrongly typed fields is rejected, not thrown on") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {5}).ok());
  const std::string manifest_path = scratch.path + "/step-5/MANIFEST.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"/shards/0/tp", "0"}, {"/shards/0/crc32c", 12}, {"/shards/0/bytes", -1}, {"/shards/0", 3},
      {"/tp_size", 0},       {"/step", "5"},           {"/shards", "none"}};
  for (const auto& [pointer, value] : edits) {
    CAPTURE(pointer);
    nlohmann::json edited = manifest;
    edited[nlohmann::json::json_pointer(pointer)] = value;
    std::ofstream(manifest_path, std::ios::trunc) << edited.dump();
    Status verified = Status();
    CHECK_NOTHROW(verified = verify_checkpoint(scratch.path, 5));
    CHECK_FALSE(verified.ok());
  }
}

TEST_CASE("checkpoint: a save that fails mid-write (as on a full disk) leaves no temp file and the good step") {
  ScratchDir scratch;
  REQUIRE(save_steps(scratch.path, {10}, 1).ok());
  // A small shard is written by the saving thread; a large one by a second thread while the
  // first computes its CRC: both must fail the same way.
  size_t payload_bytes = 100000;
  uint64_t limit_bytes = 1000;
  SUBCASE("small shard, one thread") {}
  SUBCASE("large shard, written while checksummed") {
    payload_bytes = (size_t{12} << 20) + 3;
    limit_bytes = uint64_t{5} << 20;
  }
  {
    dtrain::testing::FileSizeLimit limit(limit_bytes);
    Settings settings;
    settings.generation = 1;
    auto worker = Worker::standalone(settings);
    CheckpointOptions options;
    options.dir = scratch.path;
    options.keep = 1;
    Checkpointer checkpointer(*worker, options);
    Status saved = checkpointer.save(20, std::string(payload_bytes, 's'));
    if (saved.ok()) saved = checkpointer.wait();
    REQUIRE_FALSE(saved.ok());
    CHECK(contains(saved.error().message, "checkpoint step-20"));
    CHECK(contains(saved.error().message, "File too large"));
  }
  for (const auto& entry : fs::recursive_directory_iterator(scratch.path)) {
    CAPTURE(entry.path().string());
    CHECK_FALSE(contains(entry.path().filename().string(), ".tmp."));
  }
  CHECK_FALSE(fs::exists(scratch.path + "/step-20/MANIFEST.json"));
  CHECK(*latest_complete(scratch.path).latest == 10);
  CHECK(read_shard(scratch.path, 10, 0, 0).value() == "state at step 10");
}

/// Permission bits of `path` (not followed).
unsigned mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  REQUIRE(S_ISREG(info.st_mode));
  return info.st_mode & 07777;
}

TEST_CASE("checkpoint: shards and manifests are 0600, or exactly checkpoint.file_mode (0640) whatever the umask") {
  ScratchDir scratch;
  mode_t old_umask = ::umask(022);
  Status saved = save_steps(scratch.path, {10});
  ::umask(old_umask);
  REQUIRE(saved.ok());
  CHECK(mode_of(shard_path(scratch.path, 10)) == 0600);
  CHECK(mode_of(scratch.path + "/step-10/MANIFEST.json") == 0600);

  old_umask = ::umask(077);  // the key is the user's explicit choice: the umask does not narrow it
  Settings settings;
  settings.generation = 1;
  settings.ckpt_file_mode = 0640;
  auto worker = Worker::standalone(settings);
  Checkpointer checkpointer(*worker, checkpoint_options([&] {
                              Settings with_dir = settings;
                              with_dir.ckpt_dir = scratch.path;
                              return with_dir;
                            }()));
  saved = checkpointer.save(20, "state at step 20");
  ::umask(old_umask);
  REQUIRE(saved.ok());
  CHECK(mode_of(shard_path(scratch.path, 20)) == 0640);
  CHECK(mode_of(scratch.path + "/step-20/MANIFEST.json") == 0640);
}

TEST_CASE("checkpoint: a link planted at the old predictable temp name is not followed, its target untouched") {
  ScratchDir scratch;
  std::string victim = scratch.path + "/victim";
  std::ofstream(victim) << "untouched\n";
  fs::create_directories(scratch.path + "/step-10");
  // The names every earlier dtrain used: "<step dir>/.<name>.tmp.<pid>".
  std::string pid = std::to_string(::getpid());
  for (const std::string& name : {std::string("shard-tp0-pp0.bin"), std::string("MANIFEST.json")}) {
    fs::create_symlink(victim, scratch.path + "/step-10/." + name + ".tmp." + pid);
  }
  REQUIRE(save_steps(scratch.path, {10}).ok());
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "untouched\n");
  CHECK(read_shard(scratch.path, 10, 0, 0).value() == "state at step 10");
  CHECK(fs::is_symlink(scratch.path + "/step-10/.shard-tp0-pp0.bin.tmp." + pid));  // left alone, not ours
}

TEST_CASE("checkpoint: a large shard (written in pieces while checksummed) restores bit for bit and its CRC is the portable one") {
  ScratchDir scratch;
  // Not a multiple of the 1 MiB write pieces, past several 8 MiB writeback ranges.
  std::string payload((size_t{19} << 20) + 5, '\0');
  std::mt19937_64 random(7);
  for (char& byte : payload) byte = static_cast<char>(random());
  {
    Settings settings;
    settings.generation = 1;
    auto worker = Worker::standalone(settings);
    CheckpointOptions options;
    options.dir = scratch.path;
    Checkpointer checkpointer(*worker, options);
    REQUIRE(checkpointer.save(30, payload).ok());
  }
  CHECK(fs::file_size(shard_path(scratch.path, 30)) == ckpt::kHeaderSize + payload.size());
  CHECK(read_shard(scratch.path, 30, 0, 0).value() == payload);
  std::ifstream shard(shard_path(scratch.path, 30), std::ios::binary);
  std::string header(ckpt::kHeaderSize, '\0');
  shard.read(header.data(), static_cast<std::streamsize>(header.size()));
  Result<ckpt::ShardHeader> decoded = ckpt::decode_header(header);
  REQUIRE(decoded.ok());
  CHECK(decoded->payload_crc == crc32c_impl::portable(payload.data(), payload.size()));

  flip_byte(shard_path(scratch.path, 30), 3 << 20);  // in a piece well after the first
  Status verified = verify_checkpoint(scratch.path, 30);
  REQUIRE_FALSE(verified.ok());
  CHECK(contains(verified.error().message, "CRC mismatch"));
}

TEST_CASE("checkpoint: a commit from a stale generation is refused and writes no manifest") {
  ScratchDir scratch;
  auto kv = std::make_shared<InProcessKv>();
  auto worker = Worker::in_process(Topology{}, Settings{}, kv);
  Checkpointer checkpointer(*worker, {scratch.path});
  REQUIRE(checkpointer.save(10, "fine").ok());
  kv->end_generation();  // the supervisor moved on: this worker is now stale
  Status refused = checkpointer.save(20, "late");
  REQUIRE_FALSE(refused.ok());
  CHECK(contains(refused.error().message, "checkpoint step-20"));
  CHECK(contains(refused.error().message, "not committed"));
  CHECK(contains(refused.error().message, "stale generation"));
  CHECK_FALSE(fs::exists(scratch.path + "/step-20/MANIFEST.json"));
  CHECK(*latest_complete(scratch.path).latest == 10);
}

namespace {
/// A store whose generation ends exactly when the committing rank asks gen.check.
class EndsAtGenCheck final : public KvClient {
 public:
  InProcessKv inner;
  Status set(const std::string& k, const std::string& v) override { return inner.set(k, v); }
  Result<std::optional<std::string>> get(const std::string& k) override { return inner.get(k); }
  Result<std::vector<std::string>> wait(const std::vector<std::string>& k, Millis t) override { return inner.wait(k, t); }
  Result<bool> generation_is_current() override {
    inner.end_generation();
    return inner.generation_is_current();
  }
};
}  // namespace

TEST_CASE("checkpoint: when gen.check says stale after all shards are written, no manifest appears") {
  ScratchDir scratch;
  auto kv = std::make_shared<EndsAtGenCheck>();
  Settings settings;
  settings.generation = 3;
  auto worker = Worker::in_process(Topology{}, settings, kv);
  Checkpointer checkpointer(*worker, {scratch.path});
  Status refused = checkpointer.save(5, "payload");
  REQUIRE_FALSE(refused.ok());
  CHECK(contains(refused.error().message, "generation 3 is no longer current"));
  CHECK(fs::exists(shard_path(scratch.path, 5)));
  CHECK_FALSE(fs::exists(scratch.path + "/step-5/MANIFEST.json"));
  CHECK_FALSE(latest_complete(scratch.path).latest.has_value());
}

TEST_CASE("checkpoint: 4 ranks (dp 2 x tp 2) write one shard per tp coordinate, spread over the replicas, and rank 0 commits after both") {
  ScratchDir scratch;
  auto kv = std::make_shared<InProcessKv>();
  std::vector<std::unique_ptr<Worker>> workers;
  for (int rank = 0; rank < 4; ++rank) {
    Topology topology{rank, 4, rank, 4, rank / 2, 2, rank % 2, 2, 0, 1};
    workers.push_back(Worker::in_process(topology, Settings{}, kv));
  }
  std::vector<Status> results(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      CheckpointOptions options{scratch.path};
      options.async = true;
      options.fault_delay_ms = rank == 3 ? 50 : 0;  // the tp1 writer is slow: rank 0 must wait for it
      Checkpointer checkpointer(*workers[rank], options);
      std::string payload = "tp" + std::to_string(rank % 2) + " dp" + std::to_string(rank / 2);
      results[rank] = checkpointer.save(100, payload);
      if (results[rank].ok()) results[rank] = checkpointer.wait();
    });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& result : results) CHECK(result.ok());
  CHECK(verify_checkpoint(scratch.path, 100).ok());
  CHECK(read_shard(scratch.path, 100, 0, 0).value() == "tp0 dp0");
  // Shard k by replica k mod data: tp0 by dp0, tp1 by dp1 (two hosts' disks, not one).
  CHECK(read_shard(scratch.path, 100, 1, 0).value() == "tp1 dp1");
  CHECK_FALSE(fs::exists(shard_path(scratch.path, 100, 0, 1)));
}
