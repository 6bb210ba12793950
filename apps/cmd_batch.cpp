#include "apps/cli.hpp"

namespace cmdbus::cli {

int run_batch(const std::vector<std::string>&) {
  throw exit_with{exit_failed, "cmdbus batch is being built"};
}

} // namespace cmdbus::cli
