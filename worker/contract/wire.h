#pragma once
// The worker ⇄ agent wire protocol (docs/architecture.md §3): one unix stream socket per worker at
// $DTRAIN_AGENT_SOCKET, newline-delimited JSON objects, each with a "type". Any language can
// speak it in a few lines (see worker/python/dtrain_worker.py). Lines longer than
// kMaxLineBytes close the connection. The agent checks the peer's uid with SO_PEERCRED.
//
// worker → agent
//   {"type":"hello","rank":R,"gen":G,"pid":P}                     first line, always
//   {"type":"beat","step":S,"phase":"train"|"checkpoint"?, ...}   phase: see below; the metrics
//    ("step_ms":..?,"loss":L?,"samples":N?,"peak_memory_bytes":B?...) are beat_metrics.h's table
//   {"type":"kv.set","id":N,"key":K,"value":V}                    V: string (hex for binary)
//   {"type":"kv.get","id":N,"key":K}
//   {"type":"kv.wait","id":N,"keys":[K...],"timeout_ms":T}
//   {"type":"kv.add","id":N,"key":K,"delta":D}                   atomic add to a decimal value
//                                                                 (absent: 0) → kv.value "<sum>"
//   {"type":"gen.check","id":N}                                   "may I commit a checkpoint?"
//   {"type":"comm.ready","ms":M}                                  communicator up (see below)
//   {"type":"ckpt.committed","step":S,"bytes":B,"ms":M}
//   {"type":"ckpt.rejected","step":S,"reason":"shard-tp0-pp0.bin: CRC mismatch ..."}
//                                                                 a checkpoint skipped on resume
//   {"type":"bye","reason":"finished"|...}
// agent → worker (replies carry the request's id)
//   {"type":"kv.ok","id":N}
//   {"type":"kv.value","id":N,"value":V|null}
//   {"type":"kv.values","id":N,"values":[V...]}
//   {"type":"gen.ok","id":N,"current":true|false,"generation":<current>}
//   {"type":"error","id":N,"error":"timeout waiting for keys [..] after 30s"}
// agent → worker, unsolicited (no id)
//   {"type":"ckpt.request","step":S,"reason":R}    save a checkpoint at step S (the first step
//                                                   >= S this rank reaches), then carry on
//   {"type":"assign","gen":G,"rank":R,"env":{K:V}}  to a warm standby (DTRAIN_STANDBY=1 or =bootstrap, which
//                                                   said {"type":"hello","standby":true,"pid":P}):
//                                                   from now on it is rank R of generation G; env
//                                                   is the whole worker environment dtrain would
//                                                   have given a new process (set it, then say the
//                                                   usual hello {rank, gen, pid} on this connection)
//   {"type":"gen.changed","gen":G}                 in-place recovery (DTRAIN_IN_PLACE=1): a rank
//                                                   failed and the supervisor continues with
//                                                   generation G without restarting this process.
//                                                   From now on the agent stamps this worker's
//                                                   messages with G; the store serves G's keys.
//
// gen.changed: abandon the step in flight (its collectives fail or would block on the dead
// rank), abort the communicators, re-rendezvous under G (connect again: the store is G's, empty)
// and agree on the state with the other ranks: the newest step every surviving rank completed,
// sent by broadcast from a surviving data-parallel replica to the replacement (DTRAIN_JOIN_LIVE).
// A worker that does not opt in never gets it (the supervisor restarts every rank instead).
//
// ckpt.request: the supervisor asks every rank at once (SIGUSR1 from Slurm's --signal before the
// job's time limit, or checkpoint.before_walltime) and picks S so far ahead that no rank has
// passed it: all ranks save the same step, so the checkpoint is complete. A worker that cannot
// checkpoint ignores it; a worker that gets a second request before saving keeps the later S.
//
// comm.ready is sent once per generation, as soon as the worker's communicator is initialised
// (Gloo mesh connected, NCCL init complete: the first collective could run). M is how long the
// initialisation took, store rendezvous included. It ends the "rendezvous" phase of a recovery
// (all ranks started → all ranks comm.ready). It is not a beat: it is never progress and it
// does not affect the beat rate limit, so the first step's beat still goes out at once.
// Workers that never send it (plain scripts) are fine; the phase is then unknown.
//
// phase says what the rank is doing from this beat on (absent: unchanged; at the start of a
// generation: "train"). A worker sends {"phase":"checkpoint"} as it starts a synchronous
// checkpoint save and {"phase":"train"} when the save returns, each at once (not rate-limited).
// While a rank is in "checkpoint", it is hung only after heartbeat.checkpoint_timeout, and its
// peers (blocked in the next collective, waiting for it) are not hung at all.
//
// Keys are per generation: the supervisor prefixes them with the generation, so a key written
// by generation g is invisible to g+1, and a write from a stale generation is refused.

namespace dtrain::contract::wire {

inline constexpr const char* kPhaseTrain = "train";
inline constexpr const char* kPhaseCheckpoint = "checkpoint";

/// The longest line, without its newline, in either direction: the agent closes a worker that
/// sends a longer one, dtrain's C++ client (worker/runtime/agent_connection.cpp) closes on a
/// longer reply, and the supervisor's store never sends one (launcher/store/kv_store.h
/// kMaxReplyBytes: a kv.get or kv.wait that would be longer is answered with an error).
inline constexpr unsigned long kMaxLineBytes = 1 << 20;

inline constexpr const char* kHello = "hello";
inline constexpr const char* kBeat = "beat";
inline constexpr const char* kKvSet = "kv.set";
inline constexpr const char* kKvGet = "kv.get";
inline constexpr const char* kKvWait = "kv.wait";
inline constexpr const char* kKvAdd = "kv.add";
inline constexpr const char* kGenCheck = "gen.check";
inline constexpr const char* kCommReady = "comm.ready";
inline constexpr const char* kCkptCommitted = "ckpt.committed";
inline constexpr const char* kCkptRejected = "ckpt.rejected";
inline constexpr const char* kBye = "bye";

inline constexpr const char* kKvOk = "kv.ok";
inline constexpr const char* kKvValue = "kv.value";
inline constexpr const char* kKvValues = "kv.values";
inline constexpr const char* kGenOk = "gen.ok";
inline constexpr const char* kError = "error";
inline constexpr const char* kCkptRequest = "ckpt.request";
inline constexpr const char* kGenChanged = "gen.changed";
inline constexpr const char* kAssign = "assign";

}  // namespace dtrain::contract::wire
