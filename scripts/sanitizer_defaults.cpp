// Sanitizer options compiled into every executable of the scripts/sanitize.sh build (the script
// compiles this file and links it through CMAKE_EXE_LINKER_FLAGS; nothing else uses it).
//
// Why compiled in and not only ASAN_OPTIONS: an instrumented dtrain runs processes that do not
// inherit the test's environment (agents started over SSH on the namespace test cluster, workers
// started with the spec's env only). Compiled-in defaults reach all of them, so every report goes
// to DTRAIN_SANITIZER_LOG_DIR (in the build tree, which the test cluster shares) where the script
// finds it, even from a daemonized supervisor whose stderr is /dev/null. ASAN_OPTIONS and
// UBSAN_OPTIONS, when set, still override single options. The options are explained in
// scripts/sanitize.sh, which exports the same.

#include <dlfcn.h>

#ifndef DTRAIN_SANITIZER_LOG_DIR
#error "sanitizer_defaults.cpp needs -DDTRAIN_SANITIZER_LOG_DIR=\"<dir>\" (scripts/sanitize.sh sets it)"
#endif
#ifndef DTRAIN_SANITIZER_EXITCODE
#error "sanitizer_defaults.cpp needs -DDTRAIN_SANITIZER_EXITCODE=<n> (scripts/sanitize.sh sets it)"
#endif

#define DTRAIN_STR2(x) #x
#define DTRAIN_STR(x) DTRAIN_STR2(x)

// Quoted: a log directory with spaces must survive the option parser (it splits at spaces).
extern "C" const char* __asan_default_options() {
  return "halt_on_error=1:abort_on_error=0:detect_leaks=1:check_initialization_order=1"
         ":log_exe_name=1:exitcode=" DTRAIN_STR(DTRAIN_SANITIZER_EXITCODE)
         ":log_path='" DTRAIN_SANITIZER_LOG_DIR "/asan'";
}

extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1:log_exe_name=1:exitcode=" DTRAIN_STR(DTRAIN_SANITIZER_EXITCODE);
}

namespace {

// With gcc, -fsanitize=address,undefined links two runtimes, libasan and libubsan, each with its
// own report file, and libubsan's own call to __sanitizer_set_report_path binds to libasan's
// (same exported name, libasan comes first): UBSan's log_path is silently ignored and its reports
// go to stderr. Calling libubsan's own copy, found through its handle, sends them to the log
// directory too. (clang has one runtime; there the lookup finds nothing and this does nothing.)
__attribute__((constructor)) void send_ubsan_reports_to_log_dir() {
  void* ubsan = ::dlopen("libubsan.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (ubsan == nullptr) return;
  using SetReportPath = void (*)(const char*);
  auto set_report_path = reinterpret_cast<SetReportPath>(::dlsym(ubsan, "__sanitizer_set_report_path"));
  if (set_report_path != nullptr) set_report_path(DTRAIN_SANITIZER_LOG_DIR "/ubsan");
}

}  // namespace
