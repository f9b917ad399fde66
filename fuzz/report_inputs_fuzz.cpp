// Fuzz target: the run-directory files `dtrain report` reads in a way of its own — one
// metrics.jsonl line (parse_metrics_line) and a hosts/<host>.json file (parse_host_facts) —
// and the HTML escaping everything from the run directory goes through. Input: the bytes, given
// to all three.
// Invariants: nothing throws; in an accepted metrics line ranks are >= 0, numbers finite, every
// resource entry names its host (or is a summary over hosts) with 1 to 64 figures; host facts
// parse or say why; html_escape's output holds none of < > " ' and is valid UTF-8 without
// control bytes.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "launcher/report/html_report.h"
#include "launcher/report/run_record.h"
#include "worker/contract/beat_metrics.h"

using namespace dtrain;
using namespace dtrain::fuzz;

namespace {

bool finite(const std::optional<double>& value) { return !value || std::isfinite(*value); }

/// Well-formed UTF-8 (what html_escape promises), with no control byte but newline and tab.
bool clean_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) return false;
      ++i;
      continue;
    }
    size_t length = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3 : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);

  Result<report::MetricsLine> line = report::parse_metrics_line(text);
  if (!line) {
    check(!line.error().message.empty(), "an error says what is wrong");
  } else {
    if (line->training) {
      for (const report::RankSample& rank : line->training->ranks) {
        check(rank.rank >= 0, "a rank is not negative");
        for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
          check(finite(rank.metrics.*metric.field), "rank figures are finite", std::string(metric.key));
        }
      }
      std::vector<const std::optional<report::Spread>*> spreads = {&line->training->step};
      for (const std::optional<report::Spread>& spread : line->training->spreads) spreads.push_back(&spread);
      for (const std::optional<report::Spread>* spread : spreads) {
        if (*spread) check(std::isfinite((*spread)->min) && std::isfinite((*spread)->median) && std::isfinite((*spread)->max),
                           "a spread is finite");
      }
    }
    for (const report::HostResources& resources : line->resources) {
      check(resources.summary || !resources.host.empty(), "host figures name their host");
      check(!resources.values.empty() && resources.values.size() <= 64, "1 to 64 figures per host");
      for (const auto& [name, value] : resources.values) check(!name.empty() && std::isfinite(value), "a named finite figure", name);
    }
  }

  Result<report::HostFacts> host = report::parse_host_facts(text, "fallback");
  if (host) check(!host->name.empty() || text.find("\"host\"") != std::string_view::npos, "a host has a name");

  std::string escaped = report::html_escape(text);
  check(escaped.find_first_of("<>\"'") == std::string::npos, "no markup character survives escaping");
  check(clean_utf8(escaped), "escaped text is valid UTF-8 without control bytes");
  return 0;
}
