#pragma once
// A prepared SQLite statement that finalizes itself; binds by 1-based index. Internal to
// launcher/registry (the public headers do not expose sqlite3).

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::registry {

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql) {
    prepared_ = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &statement_, nullptr);
  }
  ~Statement() { finish(); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return prepared_ == SQLITE_OK && statement_ != nullptr; }
  /// SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return ok() ? sqlite3_step(statement_) : prepared_; }
  void reset() {
    if (statement_) sqlite3_reset(statement_);
  }
  void finish() {
    if (statement_) sqlite3_finalize(statement_);
    statement_ = nullptr;
  }

  Statement& bind(int index, std::string_view text) {
    if (statement_) sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, int64_t value) {
    if (statement_) sqlite3_bind_int64(statement_, index, value);
    return *this;
  }
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  template <class Number>
  Statement& bind(int index, const std::optional<Number>& value) {
    if (value) return bind(index, *value);
    if (statement_) sqlite3_bind_null(statement_, index);
    return *this;
  }

  sqlite3_stmt* raw() const { return statement_; }
  bool column_is_null(int column) const { return sqlite3_column_type(statement_, column) == SQLITE_NULL; }
  int column_int(int column) const { return sqlite3_column_int(statement_, column); }
  int64_t column_int64(int column) const { return sqlite3_column_int64(statement_, column); }
  std::string column_text(int column) const {
    const unsigned char* text = sqlite3_column_text(statement_, column);
    return text ? std::string(reinterpret_cast<const char*>(text)) : std::string();
  }

 private:
  sqlite3_stmt* statement_ = nullptr;
  int prepared_ = SQLITE_ERROR;
};

}  // namespace dtrain::registry
