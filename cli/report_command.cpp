// `dtrain report RUN [-o FILE] [--trace FILE] [--open]`: one self-contained HTML page about a run
// (report.html in the run directory by default) and its timeline in Chrome's trace format
// (timeline.json beside it, for Perfetto). Reads the run directory only, so it works during the
// run, after it, and for a run whose supervisor died. RUN is a run id, a unique prefix of one,
// or the path of a run directory.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "launcher/base/child_process.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/report/report_files.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain::cli {
namespace {

struct ReportOptions {
  std::string run;
  std::string output;
  std::string trace;
  std::string mode = "0600";
  bool open = false;
};

/// A directory path given as RUN (it holds events.jsonl), else the run by id or prefix.
Result<std::string> run_directory_of(const std::string& run) {
  struct stat info {};
  if (run.find('/') != std::string::npos || (::stat((run + "/events.jsonl").c_str(), &info) == 0)) {
    if (::stat(run.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return Error::user(run + ": no such run directory");
    }
    return run;
  }
  Result<RunDirectory> directory = RunDirectory::open(run);
  if (!directory) return directory.error();
  return directory->path();
}

/// xdg-open when there is a display to open it on; otherwise the path is all we can give.
void open_in_browser(const std::string& path) {
  const char* display = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  bool has_display = (display && *display) || (wayland && *wayland);
  std::string xdg_open;
  for (const std::string& directory : split(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin", ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/xdg-open";
    if (::access(candidate.c_str(), X_OK) == 0) {
      xdg_open = candidate;
      break;
    }
  }
  if (!has_display || xdg_open.empty()) {
    std::printf("no display to open it on (%s); open file://%s in a browser\n",
                xdg_open.empty() ? "xdg-open not found" : "DISPLAY and WAYLAND_DISPLAY unset", path.c_str());
    return;
  }
  Result<CommandOutput> opened = run_command({xdg_open, path}, Millis(15000));
  if (!opened || opened->exit_code != 0) {
    std::fprintf(stderr, "dtrain report: xdg-open %s failed (%s); open it in a browser\n", path.c_str(),
                 opened ? printable(opened->err, 300).c_str() : opened.error().message.c_str());
  }
}

int make_report(const ReportOptions& options) {
  Result<std::string> directory = run_directory_of(options.run);
  if (!directory) {
    std::fprintf(stderr, "dtrain report: %s\n", directory.error().message.c_str());
    return exit_code_for(directory.error());
  }
  std::optional<int> mode = parse_data_file_mode(options.mode);
  if (!mode) {
    std::fprintf(stderr,
                 "dtrain report: --mode '%s' is not a report file mode; use octal with owner read-write, no execute "
                 "bit and no write for others: 0600 (the default), 0640 (group) or 0644 (everyone, for a web server)\n",
                 printable(options.mode, 64).c_str());
    return to_int(ExitCode::usage);
  }
  Result<report::ReportFiles> files = report::write_report(*directory, options.output, options.trace, {}, *mode);
  if (!files) {
    std::fprintf(stderr, "dtrain report: %s\n", files.error().message.c_str());
    return exit_code_for(files.error());
  }
  if (files->unreadable_files > 0) {
    std::fprintf(stderr, "dtrain report: warning: %lld files of the run left out (named at the end of the report)\n",
                 static_cast<long long>(files->unreadable_files));
  }
  if (files->skipped_lines > 0) {
    std::fprintf(stderr, "dtrain report: warning: %lld damaged lines left out (listed at the end of the report)\n",
                 static_cast<long long>(files->skipped_lines));
  }
  std::printf("report:   %s (%zu kB, %lld events)\ntimeline: %s (Perfetto: ui.perfetto.dev, Open trace file)\n",
              files->html_path.c_str(), (files->html_bytes + 999) / 1000, static_cast<long long>(files->events),
              files->trace_path.c_str());
  if (options.open) open_in_browser(files->html_path);
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* command = app.add_subcommand(
      "report", "Write a run's HTML report (outcome, plan, timeline, curves, checkpoints, recoveries) and timeline.json");
  command->add_option("run", options->run, "Run id, a unique prefix of one, or a run directory")->required();
  command->add_option("-o,--output", options->output, "The HTML file (default: <run dir>/report.html)");
  command->add_option("--trace", options->trace, "The Chrome trace file (default: timeline.json beside the HTML file)");
  command->add_option("--mode", options->mode,
                      "Permission bits of both files (default 0600: owner only; 0640 group, 0644 everyone)");
  command->add_flag("--open", options->open, "Open the report with xdg-open (prints the path when there is no display)");
  command->callback([options, &context] { context.exit_code = make_report(*options); });
}

}  // namespace dtrain::cli
