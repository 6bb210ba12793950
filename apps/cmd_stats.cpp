#include "apps/cli.hpp"

namespace cmdbus::cli {

int run_stats(const std::vector<std::string>&) {
  throw exit_with{exit_failed, "cmdbus stats is being built"};
}

} // namespace cmdbus::cli
