#pragma once
// The implementations behind worker::crc32c() (declared in worker.h), exposed so that tests can
// hold the CPU instruction path against the portable one and the bench can say which one ran.
// Internal header.
//
// All of them compute the same function (CRC32C, reflected polynomial 0x82F63B78, initial and
// final XOR 0xFFFFFFFF, chained through `crc`), so a checkpoint written on a machine with the
// instruction verifies on one without it.

#include <cstddef>
#include <cstdint>

namespace dtrain::worker::crc32c_impl {

/// Slicing-by-8 tables, any CPU: about 1.5-2 GB/s on a current core.
uint32_t portable(const void* data, size_t size, uint32_t crc = 0);

/// True when this CPU has a CRC32C instruction that this build can use (x86-64 SSE4.2, checked
/// at run time with cpuid; AArch64 with the CRC extension, from the compiler's target or hwcap).
bool hardware_available();

/// The instruction, three independent streams interleaved to hide its latency. Call it only when
/// hardware_available(); it falls back to portable() otherwise, so a mistaken call is slow, not wrong.
uint32_t hardware(const void* data, size_t size, uint32_t crc = 0);

/// "sse4.2", "armv8-crc" or "table": what worker::crc32c() uses on this machine.
const char* implementation_name();

}  // namespace dtrain::worker::crc32c_impl
