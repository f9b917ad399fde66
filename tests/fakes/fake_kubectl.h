#pragma once
// FakeKubectl: a `kubectl` that is a shell script in a temporary directory. It records each
// command line it gets (args()) and then runs `body`, which answers as a cluster would, so unit
// tests see dtrain's exact kubectl calls and its reading of the answers without a cluster.

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace dtrain::testing {

struct FakeKubectl {
  std::string dir;
  std::string path;
  explicit FakeKubectl(const std::string& body) {
    char pattern[] = "/tmp/dtrain-fake-kubectl-XXXXXX";
    dir = ::mkdtemp(pattern);
    path = dir + "/kubectl";
    std::ofstream(path) << "#!/bin/sh\necho \"$*\" >> " << dir << "/args\n" << body;
    ::chmod(path.c_str(), 0700);
  }
  ~FakeKubectl() { std::system(("rm -rf '" + dir + "'").c_str()); }
  FakeKubectl(const FakeKubectl&) = delete;
  FakeKubectl& operator=(const FakeKubectl&) = delete;
  std::string args() const {
    std::ifstream in(dir + "/args");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

}  // namespace dtrain::testing
