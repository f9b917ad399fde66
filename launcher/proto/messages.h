#pragma once
// The agent ⇄ supervisor protocol (docs/architecture.md §3), carried over an SSH channel or, for
// localhost, a pipe pair to a child `dtrain agent`. Each message is one frame (frame.h): a
// JSON object with a "type". The supervisor speaks first (config); the agent answers hello.
// Times an agent reports are its own wall clock (ms since the epoch); the supervisor corrects
// them with the offset it measured at hello.
//
// supervisor → agent
//   config  {protocol, run_id, host, runtime_dir, heartbeat_interval_ms, heartbeat_timeout_ms,
//            supervisor_time_ms, batch_beats?, stack?, health?, reattach_ms?}
//           reattach_ms (default 0: off; the supervisor sets it for a host it reaches through a
//           relay): when the channel ends (stdin EOF, the session's process gone, a write that
//           fails, or heartbeat_timeout_ms of silence) the agent does not fence: it keeps its
//           workers and waits this long for a re-attach on the unix socket hello.attach_socket
//           (mode 0600 in the private runtime directory; a peer of another uid is refused). A
//           connection there becomes the channel; the agent's first frame on it is reattached
//           {host, pid, detached_ms, reason, workers:[{gen, rank, pid}], exits:[exit frames of
//           its retained generations]}, then what it queued while detached (beats are not
//           queued). No re-attach in time: it fences as before.
//   attach  {socket}  the first frame to a fresh `dtrain agent` instead of config: it connects
//           to that path (a detached agent's attach_socket) and carries bytes both ways until
//           either side ends; nothing else. It cannot: error {about:"attach"} and exit 3.
//           health {checkpoint_dir?, master_addr?, command?, command_timeout_ms, diagnose?,
//           diagnose_timeout_ms, leftover_gpu_memory_mb, reclaim_wait_ms, write_timeout_ms,
//           min_free_mb} (host_health.h): check this host once after hello and say it in a
//           health {id:0, report} frame.
//           stack {argv, workdir?, env, timeout_ms} (stack_fingerprint.h): fingerprint this
//           host's software stack for that worker command and say it in hello.stack (spec
//           consistency strict or warn). The interpreter's probe is killed past timeout_ms.
//           batch_beats (default false): see beat.worker_beats; an agent that does not know it
//           ignores it and forwards every beat, which the supervisor reads just as well.
//           runtime_dir: the run's worker-socket directory, whole, e.g. /tmp/dtrain-0/3fa2c1d0
//           (last component: the run's short id, [A-Za-z0-9._-], at most 64 bytes). The agent
//           uses that path (never one derived from a uid) if each component is ours, mode 0700
//           and not a symlink (another user's directory could hold a planted socket); if not,
//           it makes a fresh private one (mkdtemp, `<base>-XXXXXX` or /tmp/dtrain-<euid>-XXXXXX)
//           and says so once after hello: error {about:"runtime_dir", message naming the refused
//           directory, its owner and the path used}; the run goes on. hello.socket reports the
//           path it chose. Only a bad run id or no private directory at all is error
//           {about:"config"} and exit 3.
//   spawn   {gen, argv:[..], workdir, env:{K:V} (common to all), workers:[{rank, local_rank,
//            env:{K:V}}], log_tail_lines, instrument?}
//           The agent adds DTRAIN_AGENT_SOCKET itself, and TORCHELASTIC_ERROR_FILE (per rank, in
//           its runtime directory, as torchrun does). instrument (default false): put the
//           agent's Python bootstrap (worker/python/bootstrap) first on PYTHONPATH, before the
//           PYTHONPATH the worker would otherwise get. Workers start in their own process group.
//           standby (default 0): warm standbys (elastic.standby_per_host). The agent keeps this
//           many extra processes of argv started with the spawn's env, workdir and instrument,
//           without any worker's own env, plus DTRAIN_STANDBY=1 and DTRAIN_AGENT_SOCKET: each
//           connects and says hello {standby:true, pid} and waits. A later spawn of a worker
//           whose env has DTRAIN_JOIN_LIVE=1 takes a ready standby instead of a new process:
//           the agent sends it assign {gen, rank, env} (wire.h) and reports started {gen, rank,
//           local_rank, pid, standby:true}; then it starts another to refill the pool. Standbys
//           belong to no generation: a fence and kill {gen:-1} end them, other kills do not;
//           one that exits before it is assigned is replaced (at most once a second).
//           standby_bootstrap (with standby > 0): [module names]: the standbys are a pool of an
//           unmodified script (spec worker.pool): started with DTRAIN_STANDBY=bootstrap and
//           DTRAIN_STANDBY_IMPORTS=<names, comma-separated>, they wait in the bootstrap, and
//           every worker of a spawn takes a ready one (not only a join-live one). The pool
//           refills once every worker on the host has beaten since the spawn or assign (at most
//           30 s after it).
//   kill    {gen, signal:"TERM"|"KILL", grace_ms}
//           TERM every worker group of `gen`, KILL whatever remains after grace_ms, then answer
//           released. gen -1: every generation. Each TERM is followed by SIGCONT, so a stopped
//           (hung, SIGSTOPped) worker acts on it instead of waiting out the grace.
//   ping    {id, supervisor_time_ms}   also the supervisor's heartbeat: an agent that hears
//                                      nothing for heartbeat_timeout_ms fences itself
//   to_worker {gen, rank, msg:{..}}    a reply for one worker (kv.*, gen.ok, error)
//   reserve_port {id}                  find a free TCP port on this host for MASTER_PORT
//   fence   {reason}                   kill everything now and exit (also on stdin EOF)
//   sample  {id, gen, rank, pid, timeout_ms}
//           describe a hung worker before it is killed (kernel stack, wchan, state, gdb
//           backtrace when gdb is installed). pid must be a live worker of this agent with that
//           gen and rank, else the reply carries an error instead. The agent's loop is busy for
//           up to timeout_ms (capped at heartbeat_timeout_ms / 2; a beat follows each reply), so
//           keep it small: the driver passes min(heartbeat.timeout / 2, 5 s). Send it before
//           the kill: frames are handled in order, so the sample sees the hung process.
//   gen_changed {id, from, to}
//           in-place recovery: every live worker of generation `from` on this host now belongs
//           to `to` (its exit, beats, log lines and store requests carry `to`; kill {gen: to}
//           ends it), and is told so on its socket (wire.h gen.changed). Held beats of `from`
//           are flushed first. Answered by gen_changed. Workers of `from` that already exited
//           are not carried over.
//   health  {id, moment, diagnose}
//           run the host's health checks now (config.health says which; host_health.h) and
//           answer health {id, report}. moment: "join" (before a re-rendezvous takes this host
//           in) or "after failure" (it was blamed for one); diagnose: also run config.health's
//           diagnose command. The checks run off the agent's loop (beats go on meanwhile).
//   kill    {gen, signal, grace_ms, ranks:[r..]}   with ranks: only those workers of gen (a hung
//           rank before an in-place recovery); answered by released {gen, ranks, ...} when they
//           are gone, which says nothing about the generation's other workers.
//
// agent → supervisor
//   hello   {protocol, version, host, pid, agent_time_ms, facts:{hostname, os, arch, cpus,
//            memory_mb, gpus:[{index, name, uuid?}], topology?}, stack?}
//           stack (when config asked): {os, kernel, gpu_driver, cuda, nccl, python?, torch?,
//           python_nccl?, python_cuda?, image, files:[{path, sha256}], ms, notes:[..]}; a value
//           that could not be read is "unknown (why)", one that does not exist "none". A stack
//           that does not parse is a protocol.error naming the host; the hello still counts.
//   health  {id, report:{moment, checks:[{name, verdict:"ok"|"warn"|"fail", message}], ms}}
//           the host's checks: id 0 with moment "start" once after hello when config asked
//           (the checks run off the loop: beats go on, and the hello is not delayed), else
//           the answer to a health request. One that does not parse is a protocol.error
//           naming the host, and the host counts as unchecked (warned, not refused).
//   started {gen, rank, local_rank, pid}
//   spawn_failed {gen, rank, error}
//   exit    {gen, rank, pid, code?|signal?, signal_name?, agent_time_ms, tail:[last lines]}
//   log     {gen, rank, stream:"stdout"|"stderr", line}
//   from_worker {gen, rank, msg:{..}}  every worker-protocol message (hello, beat, kv.*, ...)
//   beat    {agent_time_ms, workers:[{gen, rank, pid, alive, state}], load1, mem_available_mb,
//            worker_beats?:[{gen, rank, pid, msg}], resources?}
//           workers: only those whose process state needs the supervisor's attention (state
//           not R, S, D or I: stopped "T"/"t", zombie "Z", gone "?"); an empty list means every
//           worker runs. (Listing all of them was 40 of a beat's ~110 JSON members, parsed
//           2,048 times a second at 2,048 hosts, for the "T" the supervisor looks for.)
//           resources: the host measured by the agent's sampler thread at the heartbeat
//           interval (agent_messages.h HostResources): {agent_time_ms, cpu_percent,
//           memory_used_mb, memory_total_mb, workers:[{gen, rank, pid, cpu_percent, rss_mb,
//           processes}], gpus:[{index, utilization_percent, memory_used_mb, memory_total_mb,
//           power_w, temperature_c, ecc_corrected, ecc_uncorrected}], gpu_source:"nvml"|
//           "nvidia-smi"|"", gpu_error?, xids:[{gpu, xid, agent_time_ms}]}. Absent on a beat
//           with no new sample. GPU values come from NVML (dlopen of libnvidia-ml.so.1, or
//           $DTRAIN_NVML_LIBRARY), else from nvidia-smi --query-gpu; a value a GPU does not
//           report is left out.
//           every heartbeat_interval_ms. worker_beats: with config batch_beats, a worker's beats
//           after its first one (without a phase) are not forwarded one by one as from_worker:
//           the newest of each worker since the last agent beat rides here. A worker's other
//           messages, and its exit, first flush its held beat as from_worker, so order holds.
//           At thousands of ranks this turns one frame per rank per interval into one per host.
//   pong    {id, agent_time_ms}
//   port    {id, port}
//   sample  {id, gen, rank, pid, text}   or   {id, gen, rank, pid, error}
//           the answer to sample; text is at most kMaxSampleTextBytes (cut with a note).
//           error: not one of this agent's live workers (e.g. it exited meanwhile)
//   dump    {id, gen, rank, pid, bytes, data?|kept_path?|error?}
//           the answer to dump, one per worker: data is the dump file's bytes in base64 (at
//           most kMaxDumpBytes before encoding; the agent removes its copy), kept_path where a
//           larger one stays on this host, error why there is none (no reader on the pipe, no
//           dump within timeout_ms).
//   released {gen, killed:[pids], remaining:0, ms}
//           after a kill: every process of that generation is gone (the agent is a child
//           subreaper, so daemonised grandchildren are included)
//   error   {message}                  the agent could not do what was asked
//   protocol_error {gen?, rank?, pid, error, closed}
//           a worker sent a line the agent could not parse (worker_messages.h): dropped, not
//           forwarded. gen/rank are absent before the worker's hello. closed: the agent also
//           closed that connection (a line over the limit, or a first line that is not hello).
//   gen_changed {id, from, to, ranks:[r..], pids:[p..]}   the workers carried over (and told)
//   bye     {reason}                   the agent is exiting (after fence / EOF / silence)
//   reattached {host, pid, detached_ms, reason, workers, exits}   see config.reattach_ms

// Fields the agent adds beyond the catalogue above (all optional for a reader):
//   hello.socket            the worker socket path (also the workers' DTRAIN_AGENT_SOCKET)
//   hello.attach_socket     with config.reattach_ms: where a re-attach connects
//   started.agent_time_ms   when the worker was forked, agent clock
//   exit.local_rank
//   exit.killed_by_agent    true when a kill or fence signalled this worker: not a crash
//   exit.core_dumped        present (true) when the kernel wrote a core
//   exit.error              {type?, message, traceback?, timestamp?}: for a worker that exited
//                           non-zero or by a signal, the error record it left in its
//                           TORCHELASTIC_ERROR_FILE (torch's @record format, also written by
//                           dtrain's Python bootstrap), read with checks, at most
//                           kMaxErrorFileBytes. type is split off "Type: message".
//   from_worker.pid         the connected peer's pid as SO_PEERCRED reports it
//   beat.workers[].gen, beat.workers[].state   state: /proc letter (R, S, D, T = stopped, Z)
//   pong.supervisor_time_ms echoed from the ping, for round-trip and clock-offset measurement
//   released.remaining_pids only when remaining > 0 (processes stuck in the kernel: KILL did
//                           not end them within 10 s)
//   error.about, error.id, error.gen, error.rank
//                           which request failed ("to_worker", "reserve_port", "config",
//                           "runtime_dir": a warning, the agent goes on);
//                           an error without "about" is a protocol error and the agent fences
//   bye.killed              pids the fence signalled
//
// Agent behaviour the supervisor can rely on:
//   - Order: for each worker, started → log* → exit; every log line a worker wrote before it
//     exited is sent before its exit. After a kill, the exit of every worker of that
//     generation comes before released, and released means reaped (no zombie left either).
//   - Workers get the agent's environment, then DTRAIN_GENERATION=<gen>, then spawn.env, then
//     workers[].env, then DTRAIN_AGENT_SOCKET. stdin is /dev/null. Each worker is the leader
//     of its own process group and dies with the agent (PR_SET_PDEATHSIG SIGKILL).
//   - log lines are split at 64 KiB; exit.tail holds the last log_tail_lines (default 20)
//     lines of both streams.
//   - A frame the agent cannot understand (bad framing, unknown type, a field of the wrong
//     type, anything before config) gets error {message} and a fence: exit code 3.
//   - Fencing: TERM to everything, KILL after min(2 s, heartbeat_timeout_ms), reap, bye, exit.
//     Exit code 0 after stdin EOF or fence, 3 after silence / protocol error / setup failure
//     (e.g. runtime_dir unusable: error {about:"config"} first), 130 after SIGTERM/INT/HUP.
//   - hello can take a few seconds (nvidia-smi, each call capped at 5 s): measure the clock
//     offset with ping/pong afterwards, not with config → hello.
//   - config must arrive within 30 s of the agent's start, or it fences.

namespace dtrain::proto {

/// Bumped on any incompatible change; a mismatch at hello is a clear error naming the host.
inline constexpr int kProtocolVersion = 1;

/// Largest sample.text an agent sends: a gdb backtrace of every thread of a big process can be
/// megabytes, and a frame must stay far below kMaxFrameBytes.
inline constexpr unsigned long kMaxSampleTextBytes = 256 << 10;

/// Largest flight-recorder dump an agent ships in a dump frame (base64 makes it 4/3 larger; a
/// frame must stay below kMaxFrameBytes). A larger one stays on its host, named by kept_path.
inline constexpr unsigned long kMaxDumpBytes = 4 << 20;

/// Largest TORCHELASTIC_ERROR_FILE the agent reads (a longer one is not parsed): the file is
/// written by the worker, and its traceback travels in the exit frame.
inline constexpr unsigned long kMaxErrorFileBytes = 64 << 10;

namespace msg {
inline constexpr const char* kConfig = "config";
inline constexpr const char* kSpawn = "spawn";
inline constexpr const char* kKill = "kill";
inline constexpr const char* kPing = "ping";
inline constexpr const char* kToWorker = "to_worker";
inline constexpr const char* kReservePort = "reserve_port";
inline constexpr const char* kFence = "fence";
inline constexpr const char* kSample = "sample";  // request and reply
inline constexpr const char* kDump = "dump";      // request and reply
inline constexpr const char* kGenChanged = "gen_changed";  // request and reply
inline constexpr const char* kHealth = "health";            // request and reply
inline constexpr const char* kRelayOpen = "relay_open";     // relay_messages.h
inline constexpr const char* kRelayTo = "relay_to";
inline constexpr const char* kRelayFanout = "relay_fanout";
inline constexpr const char* kRelayClose = "relay_close";
inline constexpr const char* kRelayFrom = "relay_from";
inline constexpr const char* kRelayClosed = "relay_closed";
inline constexpr const char* kRelayBatch = "relay_batch";
inline constexpr const char* kAttach = "attach";          // re-attaching a relayed agent
inline constexpr const char* kReattached = "reattached";

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
inline constexpr const char* kProtocolError = "protocol_error";
}  // namespace msg

}  // namespace dtrain::proto
