#pragma once
// What a hung worker was doing, captured before it is killed: its kernel stack, wait channel,
// state and, when gdb is installed, a backtrace of every thread. Operators read these samples
// afterwards to tell a deadlocked collective from a stuck data loader.

#include <string>

#include "launcher/base/duration.h"

namespace dtrain::run {

/// Text describing process `pid` on this host. Never fails: what cannot be read says why.
/// `gdb_timeout` bounds the debugger (a stopped or D-state process can make it wait).
std::string capture_local_sample(int pid, Millis gdb_timeout);

}  // namespace dtrain::run
