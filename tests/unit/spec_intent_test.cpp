// The spec's intent section (issue 30 item 1): the model, the data, the target duration, the
// memory per GPU and the acceptable recovery, read as people write them (7B, 2T, 80GB, "200
// steps"), read back through to_yaml, and errors that name the key, quote the value and say what
// to write; the site's policy that requires an intent per tenant.

#include <doctest/doctest.h>

#include "launcher/spec/site_config.h"
#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;
using dtrain::testing::only_section_error;
using dtrain::testing::parse_section;

namespace {

const std::string kFullIntent =
    "intent:\n"
    "  model: {parameters: 7B, precision: bf16, optimizer: adamw}\n"
    "  data: {tokens: 2T, samples: 10M, sequence_length: 4K}\n"
    "  target_duration: 72h\n"
    "  gpu_memory: 60GB\n"
    "  recovery: {max_recovery: 5m, max_lost: 200 steps, mode: restart}\n";

}  // namespace

TEST_CASE("intent: absent by default, every field read, and read back through to_yaml") {
  LoadResult none = parse_section("");
  REQUIRE(none.ok());
  CHECK_FALSE(none.spec->intent.given);
  CHECK(to_yaml(*none.spec).find("intent") == std::string::npos);

  LoadResult full = parse_section(kFullIntent);
  REQUIRE_MESSAGE(full.ok(), full.message());
  const IntentSettings& intent = full.spec->intent;
  CHECK(intent.given);
  CHECK(intent.parameters == 7e9);
  CHECK(intent.precision == IntentSettings::Precision::bf16);
  CHECK(bytes_per_weight(intent.precision) == 2);
  CHECK(intent.optimizer == IntentSettings::Optimizer::adamw);
  CHECK(intent.tokens == 2e12);
  CHECK(intent.samples == 1e7);
  CHECK(intent.sequence_length == 4000);
  CHECK(intent.target_duration == Millis(72ll * 3600 * 1000));
  CHECK(intent.gpu_memory_bytes == 60'000'000'000ull);
  CHECK(intent.max_recovery == Millis(300'000));
  CHECK(intent.max_lost_steps == 200);
  CHECK(intent.mode == IntentSettings::RecoveryMode::restart);

  LoadResult again = parse_job_spec(to_yaml(*full.spec), "spec.yaml", "/elsewhere", {});
  REQUIRE_MESSAGE(again.ok(), again.message() << "\n" << to_yaml(*full.spec));
  CHECK(again.spec->intent == intent);
}

TEST_CASE("intent: binary sizes, state_bytes instead of parameters, lost time, in-place with elastic.in_place") {
  LoadResult result = parse_section(
      "elastic: {in_place: true}\n"
      "intent:\n"
      "  model: {state_bytes: 112GB, precision: fp8, optimizer: sgd-momentum}\n"
      "  gpu_memory: 40GiB\n"
      "  recovery: {max_lost: 10m, mode: in-place}\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  const IntentSettings& intent = result.spec->intent;
  CHECK(intent.state_bytes == 112'000'000'000ull);
  CHECK(intent.parameters == 0);
  CHECK(bytes_per_weight(intent.precision) == 1);
  CHECK(intent.optimizer == IntentSettings::Optimizer::sgd_momentum);
  CHECK(intent.gpu_memory_bytes == 40ull << 30);
  CHECK(intent.max_lost_time == Millis(600'000));
  CHECK(intent.max_lost_steps == 0);
  CHECK(intent.mode == IntentSettings::RecoveryMode::in_place);
  LoadResult again = parse_job_spec(to_yaml(*result.spec), "spec.yaml", "/elsewhere", {});
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->intent == intent);
}

TEST_CASE("intent: bad values name the key and the line, quote the value and say what to write") {
  CHECK(only_section_error("intent:\n  model: {parameters: lots}\n") ==
        "job.yaml:5:23: intent.model.parameters: expected a parameter count such as 7B, 350M or 1.5T, got 'lots'");
  CHECK(only_section_error("intent:\n  model: {parameters: -3B}\n").find("intent.model.parameters: expected") !=
        std::string::npos);
  CHECK(only_section_error("intent:\n  model: {parameters: 7B, precision: bf61}\n").find("did you mean 'bf16'") !=
        std::string::npos);
  CHECK(only_section_error("intent:\n  model: {precision: bf16}\n")
            .find("intent.model: says neither parameters nor state_bytes") != std::string::npos);
  CHECK(only_section_error("intent:\n  gpu_memory: 80 gigs\n") ==
        "job.yaml:5:15: intent.gpu_memory: expected the memory one GPU needs, such as 60GB or 40GiB, got '80 gigs'");
  CHECK(only_section_error("intent:\n  recovery: {max_lost: 200}\n").find(
            "intent.recovery.max_lost: expected the training a failure may cost, as steps ('200 steps') or time ('10m'), got '200'") !=
        std::string::npos);
  CHECK(only_section_error("intent:\n  recovery: {mode: in-place}\n").find(
            "intent.recovery.mode: is in-place but elastic.in_place is off") != std::string::npos);
  CHECK(only_section_error("intent:\n  target_duration: soon\n").find("intent.target_duration") != std::string::npos);
  CHECK(only_section_error("intent:\n  modle: {parameters: 7B}\n").find("did you mean 'model'") != std::string::npos);
}

TEST_CASE("site config: intent.required_for names tenants, '*' every tenant") {
  Result<SiteConfig> none = parse_site_config("", "config.yaml");
  REQUIRE(none);
  CHECK_FALSE(intent_required(*none, "nlp"));

  Result<SiteConfig> some = parse_site_config("intent:\n  required_for: [nlp, vision]\n", "config.yaml");
  REQUIRE(some);
  CHECK(intent_required(*some, "nlp"));
  CHECK(intent_required(*some, "vision"));
  CHECK_FALSE(intent_required(*some, "speech"));
  CHECK_FALSE(intent_required(*some, ""));

  Result<SiteConfig> every = parse_site_config("intent: {required_for: '*'}\n", "config.yaml");
  REQUIRE(every);
  CHECK(intent_required(*every, "speech"));
  CHECK(intent_required(*every, ""));

  Result<SiteConfig> bad = parse_site_config("intent: {requried_for: [nlp]}\n", "config.yaml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("did you mean 'required_for'") != std::string::npos);
}
