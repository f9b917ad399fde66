// Placeholder until the subcommand lands.
#include <cstdio>

#include "cli/commands.h"

namespace dtrain::cli {

void add_stop_command(CLI::App& app, CommandContext& context) {
  app.add_subcommand("stop", "(not implemented yet)")->callback([&context] {
    std::fprintf(stderr, "dtrain stop: not implemented yet\n");
    context.exit_code = 70;
  });
}

}  // namespace dtrain::cli
