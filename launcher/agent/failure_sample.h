#pragma once
// What a hung worker was doing, captured before it is killed: its kernel stack, wait channel,
// state and, when gdb is installed, a backtrace of every thread. Operators read these samples
// afterwards to tell a deadlocked collective from a stuck data loader.
//
// A public header of the agent module: the agent takes samples for the supervisor on remote
// hosts (messages.h: sample), and the driver takes them itself for workers on the launch node.

#include <cstddef>
#include <string>

#include "launcher/base/duration.h"

namespace dtrain::agent {

/// Text describing process `pid` on this host. Never fails: what cannot be read says why.
/// `gdb_timeout` bounds the debugger (a stopped or D-state process can make it wait), so the
/// whole call returns within about `gdb_timeout` plus a few /proc reads. The text is at most
/// `max_bytes` long; a longer one is cut and ends with a line saying so.
std::string capture_local_sample(int pid, Millis gdb_timeout, size_t max_bytes = 256 << 10);

}  // namespace dtrain::agent
