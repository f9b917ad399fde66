#pragma once
// Which names hold secrets, and hiding their values: one rule for spec.yaml (secret worker.env
// values are not written there), spec diagnostics, the run's console and the audit trail.
// Header-only.

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

/// What a hidden value is shown as, wherever dtrain would otherwise print or write it.
inline constexpr const char* kRedacted = "<redacted>";

/// True for a variable or key name that names a secret: it contains TOKEN, KEY, SECRET,
/// PASSWORD, PASSWD, CREDENTIAL, AUTH, COOKIE or PRIVATE, in any case (HF_TOKEN, WANDB_API_KEY,
/// AWS_SECRET_ACCESS_KEY, db_password), except TOKENIZERS_PARALLELISM and NCCL_IB_PKEY. Broad on
/// purpose: hiding a harmless value costs a reader a look at the spec; writing a real token into
/// a run directory cannot be undone.
inline bool looks_secret(std::string_view name) {
  // Common settings that only look secret: Hugging Face's tokenizer threads, NCCL's InfiniBand
  // partition key. Hiding them would make every resume ask for them.
  for (const char* plain : {"TOKENIZERS_PARALLELISM", "NCCL_IB_PKEY"}) {
    if (name == plain) return false;
  }
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* word : {"token", "key", "secret", "password", "passwd", "credential", "auth", "cookie", "private"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

/// `text` with every occurrence of each of `secrets` replaced by kRedacted. Values shorter than
/// 4 bytes are left alone: hiding every "1" or "on" would garble a message and hide nothing.
inline std::string redact_values(std::string text, const std::vector<std::string>& secrets) {
  const std::string redacted = kRedacted;
  for (const std::string& secret : secrets) {
    if (secret.size() < 4) continue;
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + redacted.size())) {
      text.replace(at, secret.size(), redacted);
    }
  }
  return text;
}

}  // namespace dtrain
