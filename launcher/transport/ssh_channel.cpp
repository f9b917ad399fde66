#include "launcher/transport/ssh_channel.h"

#include <libssh2.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace dtrain::transport {
namespace {

std::string last_error_text(LIBSSH2_SESSION* session) {
  char* message = nullptr;
  int length = 0;
  libssh2_session_last_error(session, &message, &length, 0);
  return message && length > 0 ? std::string(message, length) : std::string("unknown error");
}

}  // namespace

ExecChannel::~ExecChannel() { abandon(); }

void ExecChannel::abandon() {
  // libssh2_channel_free may need to send a close; on a dead or non-blocking session it can
  // return EAGAIN, in which case libssh2_session_free releases the channel with the session.
  if (channel_) libssh2_channel_free(channel_);
  channel_ = nullptr;
}

void ExecChannel::start(LIBSSH2_SESSION* session, std::string command) {
  session_ = session;
  command_ = std::move(command);
  state_ = State::opening;
}

bool ExecChannel::fail(const char* what, int code) {
  error_ = std::string(what) + ": " + last_error_text(session_) + " (libssh2 error " + std::to_string(code) + ")";
  state_ = State::failed;
  return true;
}

bool ExecChannel::pump() {
  bool progressed = false;
  for (;;) {
    switch (state_) {
      case State::idle:
      case State::done:
      case State::failed:
        return progressed;
      case State::opening: {
        channel_ = libssh2_channel_open_session(session_);
        if (!channel_) {
          int code = libssh2_session_last_errno(session_);
          if (code == LIBSSH2_ERROR_EAGAIN) return progressed;
          return fail("cannot open an SSH channel", code);
        }
        state_ = State::executing;
        progressed = true;
        break;
      }
      case State::executing: {
        int rc = libssh2_channel_exec(channel_, command_.c_str());
        if (rc == LIBSSH2_ERROR_EAGAIN) return progressed;
        if (rc != 0) return fail("the server refused to run the command", rc);
        state_ = State::streaming;
        progressed = true;
        break;
      }
      case State::streaming: {
        bool moved = pump_streams();
        progressed |= moved;
        if (state_ == State::streaming && !moved) return progressed;
        break;
      }
      case State::closing: {
        if (!close_sent_) {
          int rc = libssh2_channel_close(channel_);
          if (rc == LIBSSH2_ERROR_EAGAIN) return progressed;
          close_sent_ = true;  // an error here means the session is gone: still read the status
        }
        int rc = libssh2_channel_wait_closed(channel_);
        if (rc == LIBSSH2_ERROR_EAGAIN) return progressed;
        // Check the signal first: a command killed by a signal also reports exit-status 0.
        char* signal_name = nullptr;
        size_t signal_length = 0;
        libssh2_channel_get_exit_signal(channel_, &signal_name, &signal_length, nullptr, nullptr,
                                        nullptr, nullptr);
        if (signal_name) {
          exit_signal_.assign(signal_name, signal_length);
          libssh2_free(session_, signal_name);
        } else {
          exit_code_ = libssh2_channel_get_exit_status(channel_);
        }
        state_ = State::done;
        return true;
      }
    }
  }
}

bool ExecChannel::pump_streams() {
  bool moved = false;
  // stdin: as much as the window takes.
  while (input_offset_ < input_.size()) {
    size_t chunk = std::min<size_t>(input_.size() - input_offset_, 64 * 1024);
    ssize_t written = libssh2_channel_write(channel_, input_.data() + input_offset_, chunk);
    if (written == LIBSSH2_ERROR_EAGAIN) break;
    if (written < 0) return fail("writing to the remote command failed", static_cast<int>(written));
    input_offset_ += static_cast<size_t>(written);
    moved = true;
  }
  if (input_offset_ == input_.size() && input_offset_ > 0) {
    input_.clear();
    input_offset_ = 0;
  }
  if (eof_requested_ && !eof_sent_ && input_.empty()) {
    int rc = libssh2_channel_send_eof(channel_);
    if (rc == 0) {
      eof_sent_ = true;
      moved = true;
    } else if (rc != LIBSSH2_ERROR_EAGAIN) {
      return fail("closing the remote command's input failed", rc);
    }
  }
  // stdout and stderr until both would block.
  char buffer[32 * 1024];
  for (int stream : {0, SSH_EXTENDED_DATA_STDERR}) {
    for (;;) {
      ssize_t got = libssh2_channel_read_ex(channel_, stream, buffer, sizeof buffer);
      if (got == LIBSSH2_ERROR_EAGAIN || got == 0) break;
      if (got < 0) return fail("reading from the remote command failed", static_cast<int>(got));
      (stream == 0 ? stdout_ : stderr_).append(buffer, static_cast<size_t>(got));
      moved = true;
    }
  }
  if (libssh2_channel_eof(channel_)) {
    state_ = State::closing;
    moved = true;
  }
  return moved;
}

}  // namespace dtrain::transport
