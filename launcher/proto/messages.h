#pragma once
// The agent ⇄ supervisor protocol (DESIGN.md §3), carried over an SSH channel or, for
// localhost, a pipe pair to a child `dtrain agent`. Each message is one frame (frame.h): a
// JSON object with a "type". The supervisor speaks first (config); the agent answers hello.
// Times an agent reports are its own wall clock (ms since the epoch); the supervisor corrects
// them with the offset it measured at hello.
//
// supervisor → agent
//   config  {protocol, run_id, host, runtime_dir, heartbeat_interval_ms, heartbeat_timeout_ms,
//            supervisor_time_ms}
//           runtime_dir: short 0700 directory for worker sockets, e.g. /tmp/dtrain-0/3fa2c1d0
//   spawn   {gen, argv:[..], workdir, env:{K:V} (common to all), workers:[{rank, local_rank,
//            env:{K:V}}], log_tail_lines}
//           The agent adds DTRAIN_AGENT_SOCKET itself. Workers start in their own process group.
//   kill    {gen, signal:"TERM"|"KILL", grace_ms}
//           TERM every worker group of `gen`, KILL whatever remains after grace_ms, then answer
//           released. gen -1: every generation.
//   ping    {id, supervisor_time_ms}   also the supervisor's heartbeat: an agent that hears
//                                      nothing for heartbeat_timeout_ms fences itself
//   to_worker {gen, rank, msg:{..}}    a reply for one worker (kv.*, gen.ok, error)
//   reserve_port {id}                  find a free TCP port on this host for MASTER_PORT
//   fence   {reason}                   kill everything now and exit (also on stdin EOF)
//
// agent → supervisor
//   hello   {protocol, version, host, pid, agent_time_ms, facts:{hostname, os, arch, cpus,
//            memory_mb, gpus:[{index, name, uuid?}], topology?}}
//   started {gen, rank, local_rank, pid}
//   spawn_failed {gen, rank, error}
//   exit    {gen, rank, pid, code?|signal?, signal_name?, agent_time_ms, tail:[last lines]}
//   log     {gen, rank, stream:"stdout"|"stderr", line}
//   from_worker {gen, rank, msg:{..}}  every worker-protocol message (hello, beat, kv.*, ...)
//   beat    {agent_time_ms, workers:[{rank, pid, alive}], load1, mem_available_mb}
//           every heartbeat_interval_ms
//   pong    {id, agent_time_ms}
//   port    {id, port}
//   released {gen, killed:[pids], remaining:0, ms}
//           after a kill: every process of that generation is gone (the agent is a child
//           subreaper, so daemonised grandchildren are included)
//   error   {message}                  the agent could not do what was asked
//   bye     {reason}                   the agent is exiting (after fence / EOF / silence)

namespace dtrain::proto {

/// Bumped on any incompatible change; a mismatch at hello is a clear error naming the host.
inline constexpr int kProtocolVersion = 1;

namespace msg {
inline constexpr const char* kConfig = "config";
inline constexpr const char* kSpawn = "spawn";
inline constexpr const char* kKill = "kill";
inline constexpr const char* kPing = "ping";
inline constexpr const char* kToWorker = "to_worker";
inline constexpr const char* kReservePort = "reserve_port";
inline constexpr const char* kFence = "fence";

inline constexpr const char* kHello = "hello";
inline constexpr const char* kStarted = "started";
inline constexpr const char* kSpawnFailed = "spawn_failed";
inline constexpr const char* kExit = "exit";
inline constexpr const char* kLog = "log";
inline constexpr const char* kFromWorker = "from_worker";
inline constexpr const char* kBeat = "beat";
inline constexpr const char* kPong = "pong";
inline constexpr const char* kPort = "port";
inline constexpr const char* kReleased = "released";
inline constexpr const char* kError = "error";
inline constexpr const char* kBye = "bye";
}  // namespace msg

}  // namespace dtrain::proto
