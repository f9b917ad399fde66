// The audit trail's redaction: what a platform engineer passes on a command line or in a spec's
// worker.env must never reach the audit table, while the rest of the arguments stay readable.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "launcher/registry/audit_trail.h"

using namespace dtrain::registry;
using nlohmann::json;

TEST_CASE("secret-looking keys are recognised by their last dotted part") {
  for (const char* key : {"HF_TOKEN", "worker.env.WANDB_API_KEY", "db_password", "AWS_SECRET_ACCESS_KEY", "Authorization",
                          "private_key", "session_cookie", "ssh.passwd"}) {
    CHECK_MESSAGE(secret_key(key), key);
  }
  for (const char* key : {"tenant", "hosts", "worker.command", "spec", "heartbeat.timeout"}) {
    CHECK_MESSAGE(!secret_key(key), key);
  }
}

TEST_CASE("redaction: --set values under env or with secret keys, env sections, and named secret values") {
  json arguments = {{"set", {"worker.env.MY_VAR=visible-only-in-env", "tenant=vision", "ssh.identity_token=abc",
                             "heartbeat.timeout=10s"}},
                    {"env", {{"PATH", "/usr/bin"}, {"LR", "0.1"}}},
                    {"api_token", "tok-123456"},
                    {"note", "started with key hunter2-secret inside"},
                    {"world_size", 8}};
  json redacted = redact_secrets(arguments, {"hunter2-secret", "abc"});  // "abc" is too short to search for
  CHECK(redacted["set"][0] == "worker.env.MY_VAR=<redacted>");
  CHECK(redacted["set"][1] == "tenant=vision");
  CHECK(redacted["set"][2] == "ssh.identity_token=<redacted>");
  CHECK(redacted["set"][3] == "heartbeat.timeout=10s");
  CHECK(redacted["env"]["PATH"] == "<redacted>");
  CHECK(redacted["env"]["LR"] == "<redacted>");
  CHECK(redacted["api_token"] == "<redacted>");
  CHECK(redacted["note"] == "started with key <redacted> inside");
  CHECK(redacted["world_size"] == 8);
  std::string text = redacted.dump();
  for (const char* secret : {"visible-only-in-env", "tok-123456", "hunter2-secret", "/usr/bin"}) {
    CHECK_MESSAGE(text.find(secret) == std::string::npos, secret);
  }
}

TEST_CASE("a secret value is redacted everywhere it occurs, also twice in one string") {
  json redacted = redact_secrets(json{{"cmd", "a s3cr3t-value b s3cr3t-value"}}, {"s3cr3t-value"});
  CHECK(redacted["cmd"] == "a <redacted> b <redacted>");
}
