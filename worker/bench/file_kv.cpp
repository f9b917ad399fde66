#include "worker/bench/file_kv.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace dtrain::bench {

std::string FileKv::path_of(const std::string& key) const {
  static const char* digits = "0123456789abcdef";
  std::string name;
  for (char c : key) {
    auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '-') {
      name += c;
    } else {
      name += '_';
      name += digits[byte >> 4];
      name += digits[byte & 15];
    }
  }
  return dir_ + "/" + name;
}

worker::Status FileKv::set(const std::string& key, const std::string& value) {
  std::string path = path_of(key);
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << value;
    if (!out) return worker::Error{"file kv: cannot write " + temp + "; is " + dir_ + " writable?"};
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return worker::Error{"file kv: cannot rename " + temp + " to " + path};
  }
  return {};
}

worker::Result<std::optional<std::string>> FileKv::get(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return std::optional<std::string>{};
  std::ostringstream text;
  text << in.rdbuf();
  return std::optional<std::string>{text.str()};
}

worker::Result<std::vector<std::string>> FileKv::wait(const std::vector<std::string>& keys,
                                                      worker::Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> values;
  for (const std::string& key : keys) {
    for (;;) {
      worker::Result<std::optional<std::string>> value = get(key);
      if (!value) return value.error();
      if (value->has_value()) {
        values.push_back(**value);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return worker::Error{"file kv: key '" + key + "' not set within " + std::to_string(timeout.count()) +
                             "ms in " + dir_ + "; did every rank start?"};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return values;
}

}  // namespace dtrain::bench
