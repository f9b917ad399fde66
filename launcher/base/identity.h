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

/// The person behind a sudo: SUDO_USER when set (and not the same user), else empty.
inline std::string sudo_user() {
  const char* from = std::getenv("SUDO_USER");
  if (!from || !*from) return "";
  std::string name = from;
  return name == login_user() ? std::string() : name;
}

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
