#pragma once

// One chaos scenario from start to verdict: a fresh domain, the workers,
// the load, the faults, the wait for every command to become final, the
// workers' shutdown and the checks.

#include <string>

#include "bench/chaos/checks.hpp"
#include "bench/chaos/options.hpp"

namespace cmdbus::chaos {

/// Runs scenario `name` ("restart", "kill", "proxy", "stall" or "nodes")
/// with its logs in `log_dir` (created). Throws when the harness itself cannot go
/// on (e.g. scripts/pg failed, interrupted); everything it started is
/// stopped on the way out.
scenario_report run_scenario(const std::string& name, const options& o,
                             const std::string& log_dir);

} // namespace cmdbus::chaos
