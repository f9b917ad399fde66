#pragma once
// review.html: the Review (review.h) as one self-contained page: inline CSS and SVG, no script,
// no network (its Content-Security-Policy forbids them), every text taken from a run or the
// registry HTML-escaped. Four groups (current state, validation, decision, operations); each
// section says its source, when the review was generated and its scope.

#include <string>
#include <vector>

#include "launcher/review/review.h"

namespace dtrain::review {

std::string render_review_html(const Review& review);

// ---- parts (internal to launcher/review)

namespace html {
/// An HTML table: `cells` are already HTML (escape what comes from a file); a column whose
/// header starts with '#' is numeric (right-aligned, the '#' not shown).
std::string table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                  const std::string& css_class = "");
std::string percent(double fraction);
std::string hours(double value);
/// The opening of a section: its title and the line that says its source, when and scope.
std::string section_start(const Review& review, const std::string& id);
/// "No runs in this period." as a section's whole content.
std::string no_runs_note();
std::string validation_sections(const Review& review);  // review_html_validation.cpp
}  // namespace html

}  // namespace dtrain::review
