#pragma once
// The on-disk checkpoint format (docs/architecture.md §3). Internal header.
//
//   <dir>/step-<N>/shard-tp<i>-pp<j>.bin   header (below) + payload
//   <dir>/step-<N>/MANIFEST.json           written last; its presence means "complete"
//
// Shard header, 56 bytes, little-endian:
//   0  char[8] magic "DTRNCKPT"      8 u32 version (1)      12 u32 header size (56)
//   16 i64 step                      24 i64 generation
//   32 i32 tp rank                   36 i32 pp rank
//   40 u64 payload size              48 u32 CRC32C of the payload   52 u32 CRC32C of bytes 0..51

#include <cstdint>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::worker::ckpt {

inline constexpr char kMagic[8] = {'D', 'T', 'R', 'N', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderSize = 56;
inline constexpr const char* kManifestName = "MANIFEST.json";

struct ShardHeader {
  int64_t step = 0;
  int64_t generation = 0;
  int32_t tp_rank = 0;
  int32_t pp_rank = 0;
  uint64_t payload_size = 0;
  uint32_t payload_crc = 0;
};

/// What the manifest records about one shard.
struct ShardRecord {
  int tp_rank = 0;
  int pp_rank = 0;
  int64_t bytes = 0;          ///< file size, header included
  uint32_t payload_crc = 0;
};

std::string step_dir(const std::string& dir, int64_t step);
std::string shard_name(int tp_rank, int pp_rank);

std::string encode_header(const ShardHeader& header);
/// Parses and checks magic, version and header CRC; the error says which.
Result<ShardHeader> decode_header(const std::string& bytes);

/// mkdir -p for the checkpoint directory and step directory, fsyncing each created parent.
Status make_dirs(const std::string& path);

/// Writes header+payload as `<step dir>/shard-tp<i>-pp<j>.bin` with exactly `file_mode`: an
/// unpredictable temp name created O_EXCL|O_NOFOLLOW, fsync, rename, directory fsync; on any
/// failure the temp file is removed. Returns the record for the manifest.
Result<ShardRecord> write_shard(const std::string& dir, const ShardHeader& header, const std::string& payload,
                                int file_mode = 0600);

/// Writes MANIFEST.json (atomically, durably, as write_shard) for a step whose shards are all
/// in place.
Status write_manifest(const std::string& dir, int64_t step, int64_t generation, const Topology& topology,
                      const std::vector<ShardRecord>& shards, int file_mode = 0600);

/// Step numbers of `dir`'s step-<N> directories, newest first.
std::vector<int64_t> list_steps(const std::string& dir);

/// Keeps the newest `keep` steps that verify (verify_checkpoint: manifest, every shard's header
/// and CRC32C) and deletes every step directory older than the oldest of them. Deletes nothing
/// while fewer than `keep` steps verify; steps newer than that which fail are left alone.
void prune(const std::string& dir, int keep);

std::string hex32(uint32_t value);

}  // namespace dtrain::worker::ckpt
