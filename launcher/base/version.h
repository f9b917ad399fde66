#pragma once
namespace dtrain {
/// The dtrain version; agents must match it exactly (else the binary is provisioned).
inline constexpr const char* kVersion = "0.1.0";
}  // namespace dtrain
