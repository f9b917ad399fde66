// dtrain review's figures as JSON (launcher/review/review.h): every group survives the round
// trip to text and back; a field of the wrong type or a newer version is an error, never an
// exception; and the HTML page rendered from the same struct holds every section, says its
// source, and escapes what came from files.

#include <doctest/doctest.h>

#include "launcher/review/review.h"
#include "launcher/review/review_html.h"
#include "launcher/review/review_rules.h"

using namespace dtrain;
using namespace dtrain::review;

namespace {

Review sample_review() {
  Review review;
  review.generated = "2026-11-05T10:00:00.000Z";
  review.dtrain_version = "0.1.0";
  review.scope = {"2026-10-01T00:00:00.000Z", "2026-11-05T00:00:00.000Z", 1790812800000, 1793836800000, "vision",
                  {"gpu01", "gpu02"}};
  review.registry = "/home/x/registry.db";
  review.no_runs = false;
  review.summary = "2 runs";
  review.sources = {{"hosts", "registry.db: allocations"}, {"drills", "drills.jsonl"}};
  review.skipped_lines = 3;
  review.problems = {"r1: spec.yaml not read"};
  review.current.runs = 2;
  review.current.gpu_hours = 123.25;
  review.current.runs_by_state = {{"succeeded", 1}, {"failed", 1}};
  review.current.hosts_used = {{"gpu01", "gpu", 8, 96.5, 0.42, 2, 3, 1}};
  review.current.days = {{"2026-10-02", 10, 20, 0.5}};
  review.current.top_failure_causes = {{"worker.exit", 3, {"gpu01 ×2", "gpu02 ×1"}}};
  review.validation.drills = {{"2026-10-09T01:00:00.000Z", "drill-1", "r1", "vision", "live", "fail",
                               {"kill-rank:1 fail"}, {"recover 95 s > 60 s"}, 2, "drills.jsonl"}};
  review.validation.failures = {{"2026-10-03T00:00:00.000Z", "r1", "vision", 1, "worker.exit", "gpu01", 3, true,
                                 "exit code 1", {"Traceback (most recent call last):", "<script>x</script>"},
                                 "worker.exit tail (events.jsonl)"}};
  review.validation.recoveries = {{"2026-10-03T00:00:10.000Z", "r1", "vision", 2, "restart", "worker.exit", "gpu01",
                                   9000, 20, {{"detect", 1000}, {"first_step", 8000}}, ""}};
  review.validation.checkpoints = {{"r1", "vision", 4, 1, 100, 60000, 1 << 20, 1.5, 8000}};
  review.validation.releases = {{"2026-10-03T00:00:02.000Z", "r1", "vision", 1, "gpu01", 4, 0, 120, false, ""},
                                {"2026-10-04T00:00:02.000Z", "r1", "vision", 2, "gpu02", 0, 0, 0, true, "no answer"}};
  review.validation.leftovers = 1;
  review.decision.runs = {{"r1", "vision", "resnet", true, {{"max_recovery", "1m", kMissed, "longest 95.0 s"}}}};
  review.decision.data = pilot_data({1790812800000, 1790812800000 + 31LL * 24 * 3600 * 1000});
  review.decision.tenants = {{"vision", kStop, {"drill failed: drill-1"}, review.decision.data, 2, 1, 0, 1, 1, 1}};
  review.decision.rules = rules();
  review.operations.tenants = {{"vision", 2, 123.25, 0}};
  review.operations.users = {{"alice", 2, 123.25, 0}};
  review.operations.capacity_trend = {{"2026-10-01", 0.25}, {"2026-10-08", 0.5}};
  review.operations.trend = "rising";
  review.operations.standing_out = {{"gpu02", "gpu", 300, 4, 13.3, 2.1}};
  review.operations.quarantined = {{"gpu02", "4 failures", "2026-10-05T00:00:00.000Z", "2026-10-12T00:00:00.000Z",
                                    "r1", false, ""}};
  review.operations.audit = {{"2026-10-06T00:00:00.000Z", "over quota", "alice", "submit", "r2", "job.yaml",
                              "started; over quota, overridden with --over-quota"}};
  review.operations.audit_rows_in_period = 9;
  return review;
}

}  // namespace

TEST_CASE("review JSON round trip: every group's figures come back equal") {
  Review review = sample_review();
  nlohmann::json json = to_json(review);
  std::string text = json.dump();
  Result<Review> back = review_from_json(nlohmann::json::parse(text));
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  CHECK(to_json(*back) == json);
  CHECK(back->current.hosts_used.at(0).busy_fraction == doctest::Approx(0.42));
  CHECK(back->validation.failures.at(0).sample.at(1) == "<script>x</script>");
  CHECK(back->validation.recoveries.at(0).phases.at(1).name == "first_step");
  CHECK(back->decision.tenants.at(0).verdict == std::string(kStop));
  CHECK(back->decision.data.enough);
  CHECK(back->operations.audit.at(0).category == "over quota");
  CHECK(back->scope.hosts == std::vector<std::string>{"gpu01", "gpu02"});
  // The JSON's shape, as a reader of `dtrain review --json` sees it.
  CHECK(json["decision"]["tenants"][0]["verdict"] == "stop");
  CHECK(json["validation"]["releases"][1]["unconfirmed"] == true);
  CHECK(json["current"]["runs_by_state"]["failed"] == 1);
}

TEST_CASE("review JSON: a field of the wrong type and a newer version are errors, a missing field keeps its default") {
  nlohmann::json json = to_json(sample_review());
  json["current"]["runs"] = "two";
  Result<Review> wrong = review_from_json(json);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message.find("review:") == 0);
  json = to_json(sample_review());
  json["version"] = kReviewVersion + 1;
  Result<Review> newer = review_from_json(json);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().message.find("upgrade dtrain") != std::string::npos);
  Result<Review> sparse = review_from_json(nlohmann::json{{"summary", "x"}});
  REQUIRE(sparse.ok());
  CHECK(sparse->summary == "x");
  CHECK(sparse->no_runs);
  CHECK(sparse->validation.checkpoints.empty());
  CHECK_FALSE(review_from_json(nlohmann::json::array()).ok());
}

TEST_CASE("review HTML: every section with its source, nothing external, file text escaped") {
  Review review = sample_review();
  std::string page = render_review_html(review);
  for (const SectionName& section : kSections) {
    INFO(section.id);
    CHECK(page.find(std::string("<section id=\"") + section.id + "\">") != std::string::npos);
  }
  CHECK(page.find("Source: registry.db: allocations") != std::string::npos);
  CHECK(page.find("generated 2026-11-05T10:00:00.000Z") != std::string::npos);
  CHECK(page.find("tenant vision, hosts gpu01,gpu02") != std::string::npos);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("&lt;script&gt;x&lt;/script&gt;") != std::string::npos);
  CHECK(page.find("http://") == std::string::npos);
  CHECK(page.find("https://") == std::string::npos);
  CHECK(page.find("data-verdict=\"stop\"") != std::string::npos);
  CHECK(page.find("data-leftovers=\"1\"") != std::string::npos);
  CHECK(page.find("<svg") != std::string::npos);

  Review empty;
  empty.summary = "no runs in this period (2026-10-01 to 2026-11-01)";
  std::string none = render_review_html(empty);
  CHECK(none.find("no runs in this period") != std::string::npos);
  CHECK(none.find("No runs in this period: nothing to decide.") != std::string::npos);
}
