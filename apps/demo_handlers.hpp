#pragma once

#include <string>

#include "cmdbus/actors/handler_registry.hpp"

namespace cmdbus::demo {

/// Registers the demo handler for command type `Test` in `domain`. Its
/// `data.behavior` object drives it, with the knobs of the reference's
/// end-to-end test handler (all optional; success by default):
///   transient_attempts (attempts 1..N fail with a transient error, later
///     ones go on as configured: deterministic "transient, then ..."),
///   outcome ("success", "permanent" or "business_rule": the outcome of
///     every attempt after the transient ones, instead of the percentages;
///     any other value is a permanent failure DEMO_BAD_BEHAVIOR),
///   fail_permanent_pct, fail_transient_pct, fail_business_rule_pct
///     (0..100; one roll per attempt decides, in this order),
///   min_duration_ms, max_duration_ms (simulated work, uniform),
///   result (returned on success; null when absent),
///   error_code, error_message (used by failures; defaults
///     DEMO_PERMANENT / "demo permanent failure", DEMO_TRANSIENT /
///     "demo transient failure", DEMO_BUSINESS_RULE / "demo business rule").
/// With `served_by` (a handler node's name), a successful result that is
/// null or an object gets the field "served_by": served_by, so that one can
/// see where a command ran.
void register_test_handler(handler_registry& registry,
                           const std::string& domain,
                           const std::string& served_by = "");

} // namespace cmdbus::demo
