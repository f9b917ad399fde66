#pragma once
// A tiny flag parser for the benchmark tools (CLI11 belongs to cli/ only): "--name value" for
// integers, strings and comma-separated integer lists. Header-only; errors quote the value.

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dtrain::bench {

class OptionParser {
 public:
  OptionParser(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  void integer(const std::string& flag, int& target) {
    setters_[flag] = [&target](const std::string& text) { return parse_int(text, target); };
  }
  void text(const std::string& flag, std::string& target) {
    setters_[flag] = [&target](const std::string& text) { target = text; return true; };
  }
  void int_list(const std::string& flag, std::vector<int>& target) {
    setters_[flag] = [&target](const std::string& text) {
      std::vector<int> values;
      std::stringstream stream(text);
      std::string item;
      while (std::getline(stream, item, ',')) {
        int value = 0;
        if (!parse_int(item, value)) return false;
        values.push_back(value);
      }
      if (values.empty()) return false;
      target = values;
      return true;
    };
  }

  /// -1: parsed, go on; otherwise the exit code (0 after --help, 2 on a usage error).
  int parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::printf("usage: %s %s\n", program_.c_str(), usage_.c_str());
        return 0;
      }
      auto setter = setters_.find(flag);
      if (setter == setters_.end()) {
        std::fprintf(stderr, "%s: unknown option '%s'\nusage: %s %s\n", program_.c_str(), flag.c_str(),
                     program_.c_str(), usage_.c_str());
        return 2;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", program_.c_str(), flag.c_str());
        return 2;
      }
      std::string value = argv[++i];
      if (!setter->second(value)) {
        std::fprintf(stderr, "%s: %s '%s': expected a positive integer (or a comma-separated list of them)\n",
                     program_.c_str(), flag.c_str(), value.c_str());
        return 2;
      }
    }
    return -1;
  }

 private:
  static bool parse_int(const std::string& text, int& target) {
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value <= 0 || value > 1'000'000) return false;
    target = static_cast<int>(value);
    return true;
  }

  std::string program_;
  std::string usage_;
  std::map<std::string, std::function<bool(const std::string&)>> setters_;
};

}  // namespace dtrain::bench
