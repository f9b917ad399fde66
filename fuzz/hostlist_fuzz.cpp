// Fuzz target: Slurm/pdsh hostlists ("gpu[01-04,07]") and the host expressions of `hosts:`
// ("user@gpu[01-02]:2222 slots=4"). Input: the expression's bytes.
// Invariants: an expansion is non-empty, bounded, made of valid names, and expanding the names
// joined with ',' gives the same names; a parsed host expression holds valid entries that
// read back unchanged from their hostfile form.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_check.h"
#include "fuzz/host_invariants.h"
#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using namespace dtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = as_text(data, size);

  auto names = spec::expand_hostlist(text);
  if (names) {
    check(!names->empty(), "an expanded hostlist is not empty");
    check(names->size() <= 65536, "an expanded hostlist has at most 65536 names");
    for (const std::string& name : *names) check(is_plain_host_name(name), "expanded names are plain", name);
    auto again = spec::expand_hostlist(join(*names, ","));
    check(again && *again == *names, "the joined names expand to themselves", std::string(text));
  } else {
    check(!names.error().message.empty(), "an error says what is wrong");
  }

  auto hosts = spec::parse_host_expression(text);
  if (hosts) {
    check(!hosts->empty(), "a parsed host expression has hosts");
    for (const spec::HostEntry& host : *hosts) {
      check_host_entry(host);
      auto back = spec::parse_host_expression(to_hostfile_line(host));
      check(back && back->size() == 1 && (*back)[0] == host, "a host reads back from its hostfile form",
            to_hostfile_line(host) + (back ? " → " + describe(*back) : " → " + back.error().message));
    }
  } else {
    check(!hosts.error().message.empty(), "an error says what is wrong");
  }
  return 0;
}
