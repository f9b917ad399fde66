#include "launcher/metrics/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace dtrain::metrics {

namespace {

/// HELP text escapes backslash and newline; label values also the double quote. Appended to
/// `out` in runs between the characters escaped.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    const char* replacement = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '"' && quote ? "\\\"" : nullptr;
    if (replacement == nullptr) continue;
    out.append(text, start, i - start);
    out += replacement;
    start = i + 1;
  }
  out.append(text, start);
}

}  // namespace

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : "NaN";
}

void PrometheusText::family(std::string_view name, Type type, std::string_view help) {
  auto [found, added] = index_.emplace(std::string(name), families_.size());
  if (!added) return;
  families_.push_back({std::string(name), type, std::string(help), {}});
}

void PrometheusText::sample(std::string_view name, double value, const Labels& labels) {
  auto found = index_.find(name);
  if (found == index_.end()) {
    family(name, Type::gauge, name);
    found = index_.find(name);
  }
  std::string& out = families_[found->second].samples;
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out += ',';
      out += labels[i].first;
      out += "=\"";
      append_escaped(out, labels[i].second, true);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += format_sample_value(value);
  out += '\n';
}

std::string PrometheusText::text() const {
  std::string out;
  for (const Family& family : families_) {
    if (family.samples.empty()) continue;
    out += "# HELP " + family.name + ' ';
    append_escaped(out, family.help, false);
    out += '\n';
    out += "# TYPE " + family.name + (family.type == Type::counter ? " counter\n" : " gauge\n");
    out += family.samples;
  }
  return out;
}

}  // namespace dtrain::metrics
