#pragma once
// The registry's quarantine from the command line (issue 29):
//   dtrain hosts quarantine HOST --reason TEXT [--for 7d]   keep HOST out of every later plan
//   dtrain hosts release HOST [--reason TEXT]               let it back (exit 0 with a note if it was not held)
//   dtrain hosts --quarantined [--json]                     the active quarantines: host, since, until, reason, source
// Both changes are audit rows (user, time, reason). See man/dtrain-registry.1, QUARANTINE.

#include <functional>
#include <optional>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace dtrain::cli {

/// Adds `quarantine` and `release` under `hosts`, and its --quarantined flag. The hosts command's
/// callback asks the returned function first, with its own --json: it returns the exit code when
/// the command line was one of these (a subcommand already ran; --quarantined is listed now),
/// nothing when it was the preflight or --reliability.
std::function<std::optional<int>(bool json)> add_hosts_quarantine_commands(CLI::App& hosts, CommandContext& context);

}  // namespace dtrain::cli
