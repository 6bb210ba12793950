#pragma once

// Printing the figures of chaos scenarios: a table per scenario for people,
// one JSON document for tools.

#include <cstdio>
#include <string>
#include <vector>

#include "bench/chaos/checks.hpp"

namespace cmdbus::chaos {

/// Prints the table of one scenario, its failed criteria (or PASS) and a
/// few example command ids per problem.
void print_table(std::FILE* out, const scenario_report& r);

/// Returns every report as a JSON document: {"scenarios": [...], "passed"}.
std::string to_json(const std::vector<scenario_report>& reports);

} // namespace cmdbus::chaos
