#include "apps/cli.hpp"

namespace cmdbus::cli {

int run_replies(const std::vector<std::string>&) {
  throw exit_with{exit_failed, "cmdbus replies is being built"};
}

int run_wait(const std::vector<std::string>&) {
  throw exit_with{exit_failed, "cmdbus wait is being built"};
}

} // namespace cmdbus::cli
