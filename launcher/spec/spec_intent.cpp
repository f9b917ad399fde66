// intent: (issue 30 item 1) — the model, the data, the target duration, the memory per GPU and the
// acceptable recovery, as the submitter states them. Amounts read as people write them: 7B
// parameters, 2T tokens, 80GB of GPU memory, "200 steps" or "10m" lost at most.

#include <cmath>
#include <cstdlib>

#include "launcher/spec/spec_sections.h"

namespace dtrain::spec {
namespace {

struct Unit {
  const char* name;
  double scale;
};

/// A number followed by one of `units` (an optional space between); none when it is not one.
template <size_t N>
std::optional<double> parse_scaled(const std::string& text, const Unit (&units)[N]) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value)) return std::nullopt;
  std::string unit(end);
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (const Unit& known : units) {
    if (unit == known.name) return value * known.scale;
  }
  return std::nullopt;
}

/// "7B", "350M", "1.5T", "125K" or a plain number (decimal multipliers).
std::optional<double> parse_count(const std::string& text) {
  static const Unit kUnits[] = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12}};
  return parse_scaled(text, kUnits);
}

std::optional<double> parse_bytes(const std::string& text) {
  static const Unit kUnits[] = {{"", 1},           {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
                                {"GB", 1e9},       {"TB", 1e12},       {"KiB", 1024.0},       {"MiB", 1048576.0},
                                {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  return parse_scaled(text, kUnits);
}

std::string as_text(const YAML::Node& node) { return node.IsScalar() ? node.Scalar() : ""; }

/// A positive amount read by `parse`, at most `max`; the message says what was expected.
std::optional<double> read_amount(DiagnosticSink& sink, const YAML::Node* node, const std::string& key,
                                  std::optional<double> (*parse)(const std::string&), double max, const std::string& expected) {
  if (node == nullptr) return std::nullopt;
  std::optional<double> value = parse(as_text(*node));
  if (!value || *value <= 0 || *value > max) {
    sink.error(*node, key, "expected " + expected + ", got " + (node->IsScalar() ? single_quoted(node->Scalar()) : describe(*node)));
    return std::nullopt;
  }
  return value;
}

void read_model(DiagnosticSink& sink, const Section& intent_section, IntentSettings& intent) {
  Section model(sink, intent_section.get("model"), "intent.model", {"parameters", "precision", "optimizer", "state_bytes"});
  if (auto v = read_amount(sink, model.get("parameters"), model.path("parameters"), parse_count, 1e16,
                           "a parameter count such as 7B, 350M or 1.5T")) {
    intent.parameters = *v;
  }
  using Precision = IntentSettings::Precision;
  if (auto v = read_choice(sink, model.get("precision"), model.path("precision"), {"fp32", "tf32", "bf16", "fp16", "fp8"})) {
    intent.precision = *v == "fp32" ? Precision::fp32 : *v == "tf32" ? Precision::tf32 : *v == "fp16" ? Precision::fp16
                     : *v == "fp8" ? Precision::fp8 : Precision::bf16;
  }
  using Optimizer = IntentSettings::Optimizer;
  if (auto v = read_choice(sink, model.get("optimizer"), model.path("optimizer"),
                           {"adam", "adamw", "sgd", "sgd-momentum", "adafactor", "none"})) {
    intent.optimizer = *v == "adam" ? Optimizer::adam : *v == "sgd" ? Optimizer::sgd
                     : *v == "sgd-momentum" ? Optimizer::sgd_momentum : *v == "adafactor" ? Optimizer::adafactor
                     : *v == "none" ? Optimizer::none : Optimizer::adamw;
  }
  if (auto v = read_amount(sink, model.get("state_bytes"), model.path("state_bytes"), parse_bytes, 1e18,
                           "the total bytes of weights, gradients and optimizer state, such as 112GB")) {
    intent.state_bytes = static_cast<uint64_t>(*v);
  }
  if (model.node() != nullptr && model.get("parameters") == nullptr && model.get("state_bytes") == nullptr) {
    sink.error(*model.node(), "intent.model",
               "says neither parameters nor state_bytes; give the model's size, e.g. model: {parameters: 7B, precision: bf16, optimizer: adamw}");
  }
}

void read_recovery(DiagnosticSink& sink, const Section& intent_section, const ElasticSettings& elastic,
                   IntentSettings& intent) {
  Section recovery(sink, intent_section.get("recovery"), "intent.recovery", {"max_recovery", "max_lost", "mode"});
  if (auto v = read_duration(sink, recovery.get("max_recovery"), recovery.path("max_recovery"), Millis(1))) {
    intent.max_recovery = *v;
  }
  if (const YAML::Node* node = recovery.get("max_lost")) {
    std::string text = as_text(*node);
    char* end = nullptr;
    long long steps = std::strtoll(text.c_str(), &end, 10);
    std::string rest(end ? end : "");
    if (end != text.c_str() && (rest == " steps" || rest == " step") && steps > 0) {
      intent.max_lost_steps = steps;
    } else if (auto duration = parse_duration(text); duration && duration->count() > 0) {
      intent.max_lost_time = *duration;
    } else {
      sink.error(*node, recovery.path("max_lost"),
                 "expected the training a failure may cost, as steps ('200 steps') or time ('10m'), got " +
                     (node->IsScalar() ? single_quoted(text) : describe(*node)));
    }
  }
  if (auto v = read_choice(sink, recovery.get("mode"), recovery.path("mode"), {"restart", "in-place"})) {
    intent.mode = *v == "in-place" ? IntentSettings::RecoveryMode::in_place : IntentSettings::RecoveryMode::restart;
    if (intent.mode == IntentSettings::RecoveryMode::in_place && !elastic.in_place) {
      sink.error(*recovery.get("mode"), recovery.path("mode"),
                 "is in-place but elastic.in_place is off, so dtrain would restart every rank; set elastic: {in_place: true} "
                 "or mode: restart");
    }
  }
}

}  // namespace

std::optional<double> parse_byte_size(const std::string& text) { return parse_bytes(text); }

void read_intent(DiagnosticSink& sink, const Section& root, const ElasticSettings& elastic, IntentSettings& intent) {
  Section s(sink, root.get("intent"), "intent", {"model", "data", "target_duration", "gpu_memory", "recovery"});
  if (s.node() == nullptr) return;
  intent.given = true;
  read_model(sink, s, intent);
  Section data(sink, s.get("data"), "intent.data", {"samples", "tokens", "sequence_length"});
  if (auto v = read_amount(sink, data.get("samples"), data.path("samples"), parse_count, 1e18, "a sample count such as 10M")) {
    intent.samples = *v;
  }
  if (auto v = read_amount(sink, data.get("tokens"), data.path("tokens"), parse_count, 1e18, "a token count such as 2T")) {
    intent.tokens = *v;
  }
  if (auto v = read_amount(sink, data.get("sequence_length"), data.path("sequence_length"), parse_count, 1e9,
                           "the tokens in one sample, such as 4096 or 8K")) {
    intent.sequence_length = static_cast<int64_t>(std::llround(*v));
  }
  if (auto v = read_duration(sink, s.get("target_duration"), s.path("target_duration"), Millis(1000))) intent.target_duration = *v;
  if (auto v = read_amount(sink, s.get("gpu_memory"), s.path("gpu_memory"), parse_bytes, 1e15,
                           "the memory one GPU needs, such as 60GB or 40GiB")) {
    intent.gpu_memory_bytes = static_cast<uint64_t>(*v);
  }
  read_recovery(sink, s, elastic, intent);
}

}  // namespace dtrain::spec
