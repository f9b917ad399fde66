#include "launcher/run/signal_pipe.h"

#include <signal.h>
#include <unistd.h>

namespace dtrain::run {

namespace {

int g_signal_pipe_write = -1;

void on_signal(int signal_number) {
  if (g_signal_pipe_write >= 0) {
    unsigned char byte = static_cast<unsigned char>(signal_number);
    [[maybe_unused]] ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
  }
}

}  // namespace

SignalPipe::SignalPipe() {
  if (Result<Pipe> pipe = make_pipe()) {
    read_ = std::move(pipe->read_end);
    write_ = std::move(pipe->write_end);
    (void)set_nonblocking(read_.get());
    (void)set_nonblocking(write_.get());
    g_signal_pipe_write = write_.get();
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);
  ::sigaction(SIGUSR1, &action, nullptr);  // Slurm: the time limit is near (ckpt.request)
  ::signal(SIGPIPE, SIG_IGN);
}

SignalPipe::~SignalPipe() { g_signal_pipe_write = -1; }

std::string SignalPipe::take() {
  std::string bytes;
  if (!read_.valid()) return bytes;
  bool would_block = false;
  while (read_some(read_.get(), bytes, &would_block) && !would_block && !bytes.empty()) {
    if (bytes.size() > 64) break;
  }
  return bytes;
}

}  // namespace dtrain::run
