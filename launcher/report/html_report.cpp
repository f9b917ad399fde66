#include "launcher/report/html_report.h"

#include <string>

#include "launcher/base/version.h"
#include "launcher/report/html_parts.h"

namespace dtrain::report {
namespace {

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d5d9df;padding-bottom:4px}
h3{font-size:14px;margin:14px 0 4px}
.sub{color:#5b6573;margin:0 0 10px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:4px 16px 14px;margin:14px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{color:#5b6573;font-weight:600;border-bottom:1px solid #d5d9df}td:not(:last-child){white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.outcome{font-size:18px;font-weight:600;padding:8px 12px;border-radius:5px;display:inline-block;margin:8px 0}
.succeeded{background:#dcf5e3;color:#11652b}.failed{background:#fde0de;color:#8c1d18}.other{background:#fff2cc;color:#6b4e00}
.cause{border-left:4px solid #c62828;padding:4px 10px;background:#fff6f5;margin:8px 0}
pre{background:#f2f4f7;padding:8px;overflow:auto;font-size:12px;max-height:260px}
svg{display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#3b4450}
.legend span{display:inline-block;margin:0 14px 4px 0;font-size:12px}.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.note{color:#5b6573;font-size:12px}.warn{color:#8c1d18}
)";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  static const char* kReplacement = "\xEF\xBF\xBD";
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      switch (byte) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default:
          if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) out += kReplacement;
          else out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence passes as it is (no overlongs, no surrogates); any other
    // byte becomes U+FFFD on its own.
    size_t length = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3 : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (valid && length >= 3) {
      auto second = static_cast<unsigned char>(text[i + 1]);
      if (byte == 0xE0 && second < 0xA0) valid = false;  // overlong
      if (byte == 0xED && second >= 0xA0) valid = false;  // surrogate
      if (byte == 0xF0 && second < 0x90) valid = false;  // overlong
      if (byte == 0xF4 && second >= 0x90) valid = false;  // beyond U+10FFFF
    }
    if (!valid) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string render_html(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  using namespace page;
  std::string name = record.run_id;
  if (const auto* submitted = last_event<events::RunSubmitted>(record); submitted && !submitted->run_name.empty()) {
    name = submitted->run_name;
  }
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
                    "<title>dtrain report: " + e(record.run_id) + "</title><style>" + kStyle + "</style></head><body><main>";
  out += "<h1>dtrain report: " + e(record.run_id) + "</h1><p class=\"sub\">job " + e(name) + " · run directory " +
         e(record.dir) + " · " + std::to_string(record.events.size()) + " events · made by dtrain " + kVersion + "</p>";
  out += outcome_section(record, timeline);
  out += intent_section(record, limits);
  out += plan_section(record);
  out += timeline_section(timeline, limits);
  out += curves_section(record, timeline, limits);
  out += heat_map_section(record, timeline, limits);
  out += step_split_section(record, limits);
  out += checkpoints_section(record, timeline, limits);
  out += recovery_section(timeline, limits);
  out += goodput_section(record, timeline);
  out += resources_section(record, timeline, limits);
  out += problems_section(record);
  out += "</main></body></html>\n";
  return out;
}

}  // namespace dtrain::report
