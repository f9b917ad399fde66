#pragma once
// Which CUDA device a worker uses: the CUDA ordinal of its physical slot. Pure (the values of
// DTRAIN_DEVICE and CUDA_VISIBLE_DEVICES are passed in), so that a machine without a GPU can
// test every case.

#include <optional>
#include <string>

namespace dtrain::worker {

/// The CUDA ordinal (the index cudaSetDevice takes) of this worker's GPU:
///  - DTRAIN_DEVICE (physical slot) set and listed in CUDA_VISIBLE_DEVICES: its position there
///    (with dtrain's own CUDA_VISIBLE_DEVICES that is LOCAL_RANK);
///  - DTRAIN_DEVICE set and CUDA_VISIBLE_DEVICES unset: DTRAIN_DEVICE itself;
///  - otherwise (unset, unparsable, or not among the visible devices the user chose):
///    LOCAL_RANK, as torchrun scripts do.
/// The result is taken modulo `device_count` when that is positive, so that more local ranks
/// than GPUs share them rather than fail.
int cuda_ordinal(const std::optional<std::string>& dtrain_device,
                 const std::optional<std::string>& cuda_visible_devices, int local_rank, int device_count);

}  // namespace dtrain::worker
