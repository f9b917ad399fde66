#pragma once
// The Prometheus text exposition format, version 0.0.4 (what node_exporter's textfile collector
// and a /metrics scrape read): per metric family one "# HELP" and one "# TYPE" line, then its
// samples, all together; label values escaped. Names are the caller's: dtrain_ prefix, base
// units (seconds, bytes), counters ending in _total.

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtrain::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  enum class Type { gauge, counter };

  /// Declares a family; its samples may then be added in any order (they are printed together).
  void family(std::string_view name, Type type, std::string_view help);
  /// One sample of a declared family (an undeclared one is declared as an untyped gauge).
  void sample(std::string_view name, double value, const Labels& labels = {});
  /// The exposition: every family with at least one sample, in declaration order.
  std::string text() const;

  /// "The Content-Type of a scrape": text/plain; version=0.0.4; charset=utf-8
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Family {
    std::string name;
    Type type;
    std::string help;
    std::string samples;
  };
  /// Found by a string_view without making a string: a metrics file of 16,384 hosts has
  /// hundreds of thousands of samples.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::vector<Family> families_;
  std::unordered_map<std::string, size_t, NameHash, std::equal_to<>> index_;
};

/// A sample value as the format spells it: NaN, +Inf, -Inf, or the shortest exact decimal.
std::string format_sample_value(double value);

}  // namespace dtrain::metrics
