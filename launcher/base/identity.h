#pragma once
// Who is running this command: for the run registry's runs (whom GPU-hours are charged to) and
// its audit table (who did what). Header-only; POSIX only.

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace dtrain {

/// The login name of the real user id ("uid 1234" when it has no passwd entry).
inline std::string login_user() {
  if (passwd* entry = ::getpwuid(::getuid())) return entry->pw_name;
  return "uid " + std::to_string(::getuid());
}

/// The person behind a sudo, given the real uid and $SUDO_USER: the variable counts only when the
/// real uid is 0 (sudo to root). Anyone can set SUDO_USER, so for any other caller it would let a
/// user charge a run to, and write audit rows as, someone else. Empty when it does not count, is
/// unset or empty, or names `login` itself.
inline std::string sudo_user_of(uid_t real_uid, const char* sudo_user_variable, const std::string& login) {
  if (real_uid != 0 || !sudo_user_variable || !*sudo_user_variable) return "";
  std::string name = sudo_user_variable;
  return name == login ? std::string() : name;
}

/// The person behind a sudo to root: SUDO_USER when the real uid is 0 (and it names another
/// user), else empty.
inline std::string sudo_user() { return sudo_user_of(::getuid(), std::getenv("SUDO_USER"), login_user()); }

/// Whom a run belongs to: the person behind a sudo, else the login user.
inline std::string run_owner() {
  std::string person = sudo_user();
  return person.empty() ? login_user() : person;
}

/// The audit table's actor: "alice", or "root (sudo from alice)".
inline std::string audit_actor() {
  std::string person = sudo_user();
  return person.empty() ? login_user() : login_user() + " (sudo from " + person + ")";
}

}  // namespace dtrain
