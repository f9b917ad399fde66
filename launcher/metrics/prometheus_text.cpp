#include "launcher/metrics/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace dtrain::metrics {

namespace {

/// HELP text escapes backslash and newline; label values also the double quote.
std::string escaped(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
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
  auto found = index_.find(std::string(name));
  if (found == index_.end()) {
    family(name, Type::gauge, name);
    found = index_.find(std::string(name));
  }
  std::string& out = families_[found->second].samples;
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out += ',';
      out += labels[i].first + "=\"" + escaped(labels[i].second, true) + '"';
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
    out += "# HELP " + family.name + ' ' + escaped(family.help, false) + '\n';
    out += "# TYPE " + family.name + (family.type == Type::counter ? " counter\n" : " gauge\n");
    out += family.samples;
  }
  return out;
}

}  // namespace dtrain::metrics
