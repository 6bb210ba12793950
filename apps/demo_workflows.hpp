#pragma once

// The demo process type `DemoOrder`: three steps over the demo handler
// (command type `Test`, apps/demo_handlers.hpp), with compensation. Written
// the way an application writes a workflow: a typed state with its JSON
// form, a step enumeration with stored names, plain functions, then a
// `workflow_definition` (docs/processes.md).
//
// Steps: Reserve -> Charge -> Ship; Release undoes Reserve, Refund undoes
// Charge. Every step sends a `Test` command whose `behavior` the input
// decides, so that one input shows each path:
//   {"order_id": "o-1", "charge": "ok"}        COMPLETED
//   {"order_id": "o-2", "charge": "declined"}  Charge fails with a business
//                                              rule: Release, CANCELED
//   {"order_id": "o-3", "charge": "broken"}    Charge fails permanently: its
//                                              command waits in the
//                                              troubleshooting queue, the
//                                              process WAITING_FOR_TSQ until
//                                              an operator completes (Ship,
//                                              COMPLETED) or cancels it
//                                              (Release, COMPENSATED)
// "charge" defaults to "ok"; "amount" (a positive integer, default 100) is
// carried along.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cmdbus/process/registry.hpp"
#include "cmdbus/process/workflow.hpp"

namespace cmdbus::demo {

/// The stored process_type of the demo workflow.
inline constexpr const char* demo_order_type = "DemoOrder";

enum class order_step { reserve, charge, ship, release, refund };

/// What the input says the Charge step does.
enum class charge_mode { ok, declined, broken };

struct order_state {
  std::string order_id;
  int64_t amount = 100;
  charge_mode charge = charge_mode::ok;
  /// Set by Reserve's reply, cleared by Release's.
  std::optional<std::string> reservation_id;
  /// Set by Charge's reply, cleared by Refund's.
  std::optional<std::string> payment_id;
  bool shipped = false;
  /// The error code of the last FAILED reply.
  std::optional<std::string> last_error;
};

/// The state's JSON form (process.state) and back.
json to_json(const order_state& s);
order_state order_from_json(const json& x);

/// The initial state from the input; throws std::invalid_argument for input
/// it rejects (no order_id, an unknown charge, a bad amount).
order_state initial_order(const json& input);

/// The `Test` command a step sends.
step_command order_command(order_step step, const order_state& s);

/// The typed definition (to test it alone).
workflow_spec<order_state, order_step> demo_order_spec();

/// The definition as the runtime sees it (one shared instance).
std::shared_ptr<const workflow> demo_order_workflow();

/// Registers the demo workflows for `domain`.
void register_demo_workflows(process_registry& registry,
                             const std::string& domain);

} // namespace cmdbus::demo
