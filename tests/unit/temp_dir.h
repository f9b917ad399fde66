#pragma once
// A private directory for a unit test's files, removed with everything in it.

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace dtrain::testing {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/dtrain-unit-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name) << text;
    return path + "/" + name;
  }
};

}  // namespace dtrain::testing
