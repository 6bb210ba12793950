#include "cmdbus/actors/worker/fault.hpp"

#include <csignal>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace cmdbus::actors {

namespace {

int configured() noexcept {
  const char* v = std::getenv("CMDBUS_FAULT_INJECT");
  if (v == nullptr)
    return -1;
  if (std::strcmp(v, "after-receive") == 0)
    return static_cast<int>(fault_point::after_receive);
  if (std::strcmp(v, "after-handler") == 0)
    return static_cast<int>(fault_point::after_handler);
  if (std::strcmp(v, "after-commit") == 0)
    return static_cast<int>(fault_point::after_commit);
  if (std::strcmp(v, "before-process-commit") == 0)
    return static_cast<int>(fault_point::before_process_commit);
  if (std::strcmp(v, "after-process-commit") == 0)
    return static_cast<int>(fault_point::after_process_commit);
  return -1;
}

} // namespace

void maybe_crash(fault_point x) noexcept {
  static const int point = configured();
  if (point == static_cast<int>(x))
    ::kill(::getpid(), SIGKILL);
}

} // namespace cmdbus::actors
