#pragma once
// ScopedVariable: sets (or, with nullptr, unsets) an environment variable of the test process,
// and so of every process it starts, for one scope; the old value comes back at its end. For
// single-threaded test code only (setenv is not thread-safe).

#include <cstdlib>
#include <optional>
#include <string>

namespace dtrain::testing {

class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedVariable() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace dtrain::testing
