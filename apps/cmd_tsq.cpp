#include "apps/cli.hpp"

namespace cmdbus::cli {

int run_tsq(const std::vector<std::string>&) {
  throw exit_with{exit_failed, "cmdbus tsq is being built"};
}

} // namespace cmdbus::cli
