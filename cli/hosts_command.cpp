// Placeholder until the subcommand lands.
#include <cstdio>

#include "cli/commands.h"

namespace dtrain::cli {

void add_hosts_command(CLI::App& app, CommandContext& context) {
  app.add_subcommand("hosts", "(not implemented yet)")->callback([&context] {
    std::fprintf(stderr, "dtrain hosts: not implemented yet\n");
    context.exit_code = 70;
  });
}

}  // namespace dtrain::cli
