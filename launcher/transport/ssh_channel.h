#pragma once
// One SSH "exec" channel driven without blocking: open, exec, stream stdin/stdout/stderr, EOF,
// close, exit status. The SSH transport uses it for the provisioning probe, the binary upload
// and the agent itself. Every call returns at once (libssh2 in non-blocking mode); the owner
// calls pump() again when the session socket is ready.

#include <optional>
#include <string>
#include <string_view>
#include <utility>

struct _LIBSSH2_SESSION;
struct _LIBSSH2_CHANNEL;

namespace dtrain::transport {

class ExecChannel {
 public:
  enum class State { idle, opening, executing, streaming, closing, done, failed };

  ExecChannel() = default;
  ~ExecChannel();
  ExecChannel(const ExecChannel&) = delete;
  ExecChannel& operator=(const ExecChannel&) = delete;

  /// Begins opening a session channel on `session` that will run `command`.
  void start(_LIBSSH2_SESSION* session, std::string command);

  /// Advances; returns true when anything happened (state change or bytes moved).
  bool pump();

  /// Bytes for the remote stdin; sent as the window allows.
  void write(std::string_view bytes) { input_.append(bytes); }
  /// Sends EOF once everything queued is written.
  void close_input() { eof_requested_ = true; }

  /// Output since the last take.
  std::string take_stdout() { return std::exchange(stdout_, {}); }
  std::string take_stderr() { return std::exchange(stderr_, {}); }

  State state() const { return state_; }
  bool finished() const { return state_ == State::done || state_ == State::failed; }
  /// Set in state failed: what libssh2 said, e.g. "channel open failed: ... (-21)".
  const std::string& error() const { return error_; }
  /// After done: exit code, or the signal name ("KILL") when the command was killed.
  std::optional<int> exit_code() const { return exit_code_; }
  const std::string& exit_signal() const { return exit_signal_; }

  /// Frees the channel now (no close handshake); for teardown of a dead session.
  void abandon();

 private:
  bool fail(const char* what, int code);
  bool pump_streams();

  _LIBSSH2_SESSION* session_ = nullptr;
  _LIBSSH2_CHANNEL* channel_ = nullptr;
  State state_ = State::idle;
  std::string command_;
  std::string input_;
  size_t input_offset_ = 0;
  bool eof_requested_ = false;
  bool eof_sent_ = false;
  bool close_sent_ = false;
  std::string stdout_;
  std::string stderr_;
  std::string error_;
  std::optional<int> exit_code_;
  std::string exit_signal_;
};

}  // namespace dtrain::transport
