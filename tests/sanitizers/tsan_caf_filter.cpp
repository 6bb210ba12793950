// Linked into every executable of a ThreadSanitizer build (CMDBUS_SANITIZE
// =thread, cmake/Sanitizers.cmake); compiled without instrumentation.
//
// Drops exactly the TSan reports of which one side is inside libcaf_core:
// an access made by a TSan interceptor (operator new/delete, free, memcpy,
// memset, ...) that CAF's compiled code called directly. Debian's CAF is not
// built with -fsanitize=thread, so TSan misses the atomics with which CAF
// hands messages between threads and reports these accesses of CAF's as
// races with ours. tests/sanitizers/tsan.supp says why no suppression-file
// line can select these reports and nothing more.
//
// TSan's runtime asks the weak hook __tsan::OnReport, before printing a
// report, whether to drop it; its public debugging functions (the ones
// debuggers use) give the program counters of each access's stack.

#include <dlfcn.h>

#include <cstring>

extern "C" {

int __tsan_get_report_data(void* report, const char** description, int* count,
                           int* stack_count, int* mop_count, int* loc_count,
                           int* mutex_count, int* thread_count,
                           int* unique_tid_count, void** sleep_trace,
                           unsigned long trace_size);

int __tsan_get_report_mop(void* report, unsigned long idx, int* tid,
                          void** addr, int* size, int* write, int* atomic,
                          void** trace, unsigned long trace_size);

} // extern "C"

namespace {

bool in_module(void* pc, const char* name) {
  Dl_info info;
  return pc != nullptr && dladdr(pc, &info) != 0 && info.dli_fname != nullptr
         && std::strstr(info.dli_fname, name) != nullptr;
}

// Whether an access's stack starts with TSan's interceptor frames, called
// directly from libcaf_core.
bool interceptor_called_from_caf(void* const* trace, int n) {
  int i = 0;
  while (i < n && in_module(trace[i], "libtsan"))
    ++i;
  return i > 0 && i < n && in_module(trace[i], "libcaf_core");
}

bool has_side_in_caf(void* report) {
  const char* description = nullptr;
  int count = 0, stacks = 0, mops = 0, locs = 0, mutexes = 0, threads = 0;
  int tids = 0;
  void* sleep_trace[1] = {nullptr};
  if (__tsan_get_report_data(report, &description, &count, &stacks, &mops,
                             &locs, &mutexes, &threads, &tids, sleep_trace, 1)
      == 0)
    return false;
  for (int m = 0; m < mops; ++m) {
    constexpr int max_frames = 8;
    void* trace[max_frames] = {};
    int tid = 0, size = 0, write = 0, atomic = 0;
    void* addr = nullptr;
    if (__tsan_get_report_mop(report, static_cast<unsigned long>(m), &tid,
                              &addr, &size, &write, &atomic, trace, max_frames)
        == 0)
      continue;
    int n = 0;
    while (n < max_frames && trace[n] != nullptr)
      ++n;
    if (interceptor_called_from_caf(trace, n))
      return true;
  }
  return false;
}

} // namespace

namespace __tsan {

struct ReportDesc;

bool OnReport(const ReportDesc* rep, bool suppressed) {
  return suppressed
         || has_side_in_caf(const_cast<void*>(static_cast<const void*>(rep)));
}

} // namespace __tsan
