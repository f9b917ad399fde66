#pragma once
// Errors as values, shared by the worker runtime and the launcher: where I/O or input can fail,
// functions return Result<T> or Status, and exceptions never cross a module boundary. It lives
// in the worker contract because the worker may depend on nothing else of ours (std only); the
// launcher includes it through launcher/base/result.h.

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dtrain {

/// Who has to act on an error: the user (bad spec, bad flag), the infrastructure (host down,
/// disk full) or us (a bug: messages start with "internal bug:").
enum class ErrorKind { user, infra, internal };

inline const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::user: return "user";
    case ErrorKind::infra: return "infra";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

struct Error {
  ErrorKind kind = ErrorKind::internal;
  /// "where: what[; fix]" — e.g. "job.yaml:12:3: heartbeat.timeout: '5x' is not a duration;
  /// use 500ms, 10s, 5m or 1h". Written for the person who reads it (a log, a terminal).
  std::string message;

  Error() = default;
  Error(ErrorKind kind, std::string message) : kind(kind), message(std::move(message)) {}
  /// The worker runtime's form, `Error{message}`: it reads only the message, so the kind stays
  /// the default.
  explicit Error(std::string message) : message(std::move(message)) {}

  static Error user(std::string message) { return {ErrorKind::user, std::move(message)}; }
  static Error infra(std::string message) { return {ErrorKind::infra, std::move(message)}; }
  static Error internal(std::string message) {
    return {ErrorKind::internal, "internal bug: " + std::move(message)};
  }
};

/// A value or an Error. `if (!r) return r.error();`
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(Error error) : state_(std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

/// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}
  static Status success() { return {}; }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

}  // namespace dtrain
