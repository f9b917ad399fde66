// Placeholder until the subcommand lands.
#include <cstdio>

#include "cli/commands.h"

namespace dtrain::cli {

void add_status_command(CLI::App& app, CommandContext& context) {
  app.add_subcommand("status", "(not implemented yet)")->callback([&context] {
    std::fprintf(stderr, "dtrain status: not implemented yet\n");
    context.exit_code = 70;
  });
}

}  // namespace dtrain::cli
