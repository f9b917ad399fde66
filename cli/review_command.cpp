// `dtrain review [--since 30d|DATE] [--until DATE] [--tenant T] [--hosts H,...] [-o FILE]
// [--json]`: the review pack of a period (issue 30) — current state, validation, decision and
// operations — as one self-contained HTML page (review.html by default) and, with --json, the
// same figures as JSON on stdout. Reads $DTRAIN_HOME/registry.db, $DTRAIN_HOME/drills.jsonl and
// the run directories of the runs in scope. See man/dtrain-review.1.

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/drill/drill_history.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_usage.h"
#include "launcher/review/review_builder.h"
#include "launcher/review/review_html.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::cli {
namespace {

constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
/// --since takes at most ten years back in days.
constexpr int64_t kMostDaysBack = 3650;

struct ReviewOptions {
  std::string since = "30d";
  std::string until;
  std::string tenant;
  std::string hosts;
  std::string output;
  bool json = false;
};

int fail(const Error& error) {
  std::fprintf(stderr, "dtrain review: %s\n", error.message.c_str());
  return exit_code_for(error);
}

/// "30d" (days back from now) or a UTC date; the error says both forms.
Result<int64_t> parse_since(const std::string& text, int64_t now_ms) {
  if (text.size() >= 2 && text.back() == 'd' && text.find_first_not_of("0123456789") == text.size() - 1) {
    int64_t days = text.size() > 6 ? kMostDaysBack + 1 : std::stoll(text.substr(0, text.size() - 1));
    if (days >= 1 && days <= kMostDaysBack) return now_ms - days * kDayMs;
  } else if (std::optional<int64_t> date = registry::parse_date_utc(text)) {
    return *date;
  }
  return Error::user("--since '" + printable(text, 64) + "' is not a period start; write days back from now (30d, 1 to " +
                     std::to_string(kMostDaysBack) + "d) or a UTC date (2026-11-01 or 2026-11)");
}

Result<review::ReviewRequest> request_of(const ReviewOptions& options, int64_t now_ms) {
  review::ReviewRequest request;
  request.now_ms = now_ms;
  request.drill_history_path = drill::drill_history_path();
  Result<int64_t> since = parse_since(options.since, now_ms);
  if (!since) return since.error();
  request.scope.since_ms = *since;
  request.scope.until_ms = now_ms + 1;  // runs submitted up to now
  if (!options.until.empty()) {
    std::optional<int64_t> until = registry::parse_date_utc(options.until);
    if (!until) {
      return Error::user("--until '" + printable(options.until, 64) +
                         "' is not a UTC date; write 2026-12-01 or 2026-12 (exclusive: the period ends before it)");
    }
    request.scope.until_ms = *until;
  }
  if (request.scope.until_ms <= request.scope.since_ms) {
    return Error::user("--until " + format_timestamp_utc(request.scope.until_ms) + " is not after --since " +
                       format_timestamp_utc(request.scope.since_ms) + "; give an --until later than --since");
  }
  request.scope.tenant = options.tenant;
  if (!options.hosts.empty()) {
    Result<std::vector<std::string>> hosts = spec::expand_hostlist(options.hosts);
    if (!hosts) return Error::user("--hosts '" + printable(options.hosts, 200) + "': " + hosts.error().message);
    request.scope.hosts = *hosts;
  }
  return request;
}

int make_review(const ReviewOptions& options) {
  int64_t now_ms = SystemClock().wall_ms();
  Result<review::ReviewRequest> request = request_of(options, now_ms);
  if (!request) return fail(request.error());
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return fail(db.error());
  Result<review::Review> built = review::build_review(*db, *request);
  if (!built) return fail(built.error());
  const review::Review& review = *built;
  std::string output = options.output.empty() && !options.json ? "review.html" : options.output;
  std::string html;
  if (!output.empty()) {
    html = review::render_review_html(review);
    if (Status written = write_file_atomic(output, html); !written) {
      return fail(Error::infra(output + ": cannot write the review (" + written.error().message +
                              "); give another file with -o"));
    }
  }
  if (options.json) {
    std::printf("%s\n", review::to_json(review).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("review: %s (%zu kB)\n%s\n", output.c_str(), (html.size() + 999) / 1000, review.summary.c_str());
  for (const review::TenantVerdict& tenant : review.decision.tenants) {
    std::printf("  %-16s %-8s %s\n", tenant.tenant.empty() ? "(none)" : tenant.tenant.c_str(), tenant.verdict.c_str(),
                tenant.reasons.empty() ? "" : tenant.reasons.front().c_str());
  }
  if (!review.problems.empty() || review.skipped_lines > 0) {
    std::fprintf(stderr, "dtrain review: warning: %zu files or runs not fully read, %lld damaged lines left out (listed at "
                 "the end of the page)\n", review.problems.size(), static_cast<long long>(review.skipped_lines));
  }
  return 0;
}

}  // namespace

void add_review_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<ReviewOptions>();
  CLI::App* command = app.add_subcommand(
      "review", "The review pack of a period: current state, validation, decision (go / not yet / stop per tenant) and "
                "operations, as one HTML page (and --json), from the registry, drills and run directories");
  command->add_option("--since", options->since, "Runs submitted from: days back (30d, the default) or a UTC date");
  command->add_option("--until", options->until, "Runs submitted before this UTC date (default: now)");
  command->add_option("--tenant", options->tenant, "Only this tenant's runs");
  command->add_option("--hosts", options->hosts, "Only runs that held one of these hosts (a,b or gpu[01-04])");
  command->add_option("-o,--output", options->output, "The HTML file (default review.html; with --json, none unless given)");
  command->add_flag("--json", options->json, "Print the review's figures as JSON");
  command->callback([options, &context] { context.exit_code = make_review(*options); });
}

}  // namespace dtrain::cli
