// NVML through dlopen (launcher/agent/nvml_library.h): errors name the library and the call, a
// GPU without ECC reports no counts, Xids are polled without waiting.

#include <doctest/doctest.h>
#include <stdlib.h>

#include "launcher/agent/nvml_library.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::NvmlLibrary;

TEST_CASE("a library that is not there: the error names the path") {
  auto opened = NvmlLibrary::open("/nonexistent/libnvidia-ml.so.1");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error().message.rfind("/nonexistent/libnvidia-ml.so.1: cannot load", 0) == 0);
}

TEST_CASE("a library without NVML's symbols is refused, naming the first one missing") {
  auto opened = NvmlLibrary::open("libc.so.6");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error().message == "libc.so.6: has no nvmlInit_v2 (an NVML older than the driver API dtrain uses?)");
}

TEST_CASE("nvmlInit_v2 failing (no driver loaded) is an error with NVML's own words") {
  dtrain::testing::TempDir dir;
  setenv("DTRAIN_FAKE_NVML_VALUES", dir.write("nvml", "init_error=9\n").c_str(), 1);
  auto opened = NvmlLibrary::open(DTRAIN_FAKE_NVML);
  unsetenv("DTRAIN_FAKE_NVML_VALUES");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error().message == std::string(DTRAIN_FAKE_NVML) + ": nvmlInit_v2: Driver Not Loaded");
}

TEST_CASE("devices, readings and Xids from the fake NVML") {
  dtrain::testing::TempDir dir;
  std::string values = dir.write("nvml", "gpus=3\npower_mw=1500\n");
  setenv("DTRAIN_FAKE_NVML_VALUES", values.c_str(), 1);
  auto opened = NvmlLibrary::open(DTRAIN_FAKE_NVML);
  REQUIRE(opened.ok());
  NvmlLibrary& nvml = **opened;
  CHECK(nvml.device_count() == 3);
  CHECK(nvml.read(2).index == 2);
  CHECK(nvml.read(2).power_w == doctest::Approx(1.5));
  CHECK_FALSE(nvml.read(7).utilization_percent);  // no such device: nothing read
  CHECK(nvml.poll_xids(1).empty());
  dir.write("nvml", "gpus=3\nxid=2:13\nxid=0:31\n");
  auto xids = nvml.poll_xids(9);
  REQUIRE(xids.size() == 2);
  CHECK(xids[0].gpu == 2);
  CHECK(xids[0].xid == 13);
  CHECK(xids[1].gpu == 0);
  CHECK(xids[1].xid == 31);
  unsetenv("DTRAIN_FAKE_NVML_VALUES");
}

TEST_CASE("DTRAIN_NVML_LIBRARY names another library, else the driver's soname") {
  unsetenv("DTRAIN_NVML_LIBRARY");
  CHECK(dtrain::agent::nvml_library_path() == "libnvidia-ml.so.1");
  setenv("DTRAIN_NVML_LIBRARY", "/opt/x/libnvidia-ml.so", 1);
  CHECK(dtrain::agent::nvml_library_path() == "/opt/x/libnvidia-ml.so");
  unsetenv("DTRAIN_NVML_LIBRARY");
}
