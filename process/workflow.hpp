#pragma once

// Workflow definitions of process managers (sagas): what a process type
// does, as plain functions of its state and the replies it gets. No CAF, no
// libpq: a definition is tested alone, and the transition engine
// (process/transition.hpp) and the store (process/store.hpp) run it.

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus {

/// The command a step sends: its type and data (a JSON object).
struct step_command {
  std::string command_type;
  json data = json::object();
};

/// One process type, type-erased: what the runtime calls. Steps are named
/// by the strings stored in `process.current_step` and
/// `process_audit.step_name`. Applications usually fill a
/// `workflow_definition` instead of deriving from this.
///
/// Every function may throw; the transition that called it then fails and
/// writes nothing (the runtime sees the exception).
class workflow {
public:
  virtual ~workflow();

  /// The stored process_type, e.g. "OrderFulfilment".
  virtual const std::string& process_type() const = 0;

  /// Returns the initial state for the caller's `input`; throws for input
  /// it rejects.
  virtual json initial_state(const json& input) const = 0;

  /// Returns the name of the first step.
  virtual std::string first_step(const json& state) const = 0;

  /// Returns the command `step` sends, given the state.
  virtual step_command command_for(const std::string& step,
                                   const json& state) const = 0;

  /// Returns the state after the reply `r` to `step` (called for SUCCESS
  /// and FAILED replies of the current step, never for CANCELED ones).
  virtual json update_state(const json& state, const std::string& step,
                            const reply& r) const = 0;

  /// Returns the step after `step` answered SUCCESS, or none when the
  /// process is done (`state` is the updated state).
  virtual std::optional<std::string> next_step(const std::string& step,
                                               const reply& r,
                                               const json& state) const = 0;

  /// Returns the step that undoes `step`, if any (default: none).
  virtual std::optional<std::string>
  compensation_for(const std::string& step) const;
};

/// What an application writes to define a process type with a typed state
/// and a step enumeration (see `workflow_definition`). Every function is
/// required except `compensation_for`.
template <class State, class Step>
struct workflow_spec {
  /// The stored process_type.
  std::string process_type;
  /// Every step with its stored name, e.g. {{step::reserve, "Reserve"}}.
  /// Names are unique and not empty.
  std::vector<std::pair<Step, std::string>> steps;
  /// The state as JSON (stored in process.state) and back.
  std::function<json(const State&)> to_json;
  std::function<State(const json&)> from_json;
  /// The initial state from the caller's input; may throw for bad input.
  std::function<State(const json& input)> initial_state;
  std::function<Step(const State&)> first_step;
  std::function<step_command(Step, const State&)> command_for;
  /// Updates the state in place with a SUCCESS or FAILED reply to a step.
  std::function<void(State&, Step, const reply&)> update_state;
  /// The next step after a SUCCESS reply, or none when done.
  std::function<std::optional<Step>(Step, const reply&, const State&)>
    next_step;
  /// The steps that undo steps (a step without an entry has none). Each
  /// compensation is a listed step.
  std::map<Step, Step> compensation_for;
};

/// A typed process type: adapts a `workflow_spec` to the `workflow`
/// interface (state and step names converted on every call). The
/// constructor checks the spec and throws `std::invalid_argument` for a
/// missing function, an empty or repeated step name, a step listed twice,
/// or a compensation that is not a listed step.
template <class State, class Step>
class workflow_definition final : public workflow {
public:
  explicit workflow_definition(workflow_spec<State, Step> spec)
    : spec_(std::move(spec)) {
    auto fail = [this](const std::string& what) {
      throw std::invalid_argument("workflow " + spec_.process_type + ": "
                                  + what);
    };
    if (spec_.process_type.empty())
      throw std::invalid_argument("workflow: process_type is empty");
    if (!spec_.to_json || !spec_.from_json || !spec_.initial_state
        || !spec_.first_step || !spec_.command_for || !spec_.update_state
        || !spec_.next_step)
      fail("every function but compensation_for is required");
    if (spec_.steps.empty())
      fail("no steps");
    std::set<Step> seen;
    for (auto& [step, name] : spec_.steps) {
      if (name.empty())
        fail("a step has an empty name");
      if (!by_name_.emplace(name, step).second)
        fail("step name \"" + name + "\" is used twice");
      if (!seen.insert(step).second)
        fail("step \"" + name + "\" is listed twice");
    }
    for (auto& [step, comp] : spec_.compensation_for)
      if (seen.count(step) == 0 || seen.count(comp) == 0)
        fail("a compensation names a step that is not listed");
  }

  /// Returns the stored name of `step`.
  const std::string& name_of(Step step) const {
    for (auto& [s, name] : spec_.steps)
      if (s == step)
        return name;
    throw std::invalid_argument("workflow " + spec_.process_type
                                + ": step is not listed");
  }

  /// Returns the step stored as `name`; throws `std::invalid_argument` for a
  /// name this workflow does not have.
  Step step_of(const std::string& name) const {
    auto i = by_name_.find(name);
    if (i == by_name_.end())
      throw std::invalid_argument("workflow " + spec_.process_type
                                  + ": unknown step \"" + name + "\"");
    return i->second;
  }

  /// Returns the spec (to call its typed functions directly).
  const workflow_spec<State, Step>& spec() const noexcept {
    return spec_;
  }

  const std::string& process_type() const override {
    return spec_.process_type;
  }

  json initial_state(const json& input) const override {
    return spec_.to_json(spec_.initial_state(input));
  }

  std::string first_step(const json& state) const override {
    return name_of(spec_.first_step(spec_.from_json(state)));
  }

  step_command command_for(const std::string& step,
                           const json& state) const override {
    return spec_.command_for(step_of(step), spec_.from_json(state));
  }

  json update_state(const json& state, const std::string& step,
                    const reply& r) const override {
    auto s = spec_.from_json(state);
    spec_.update_state(s, step_of(step), r);
    return spec_.to_json(s);
  }

  std::optional<std::string> next_step(const std::string& step, const reply& r,
                                       const json& state) const override {
    auto next = spec_.next_step(step_of(step), r, spec_.from_json(state));
    if (!next)
      return std::nullopt;
    return name_of(*next);
  }

  std::optional<std::string>
  compensation_for(const std::string& step) const override {
    auto i = spec_.compensation_for.find(step_of(step));
    if (i == spec_.compensation_for.end())
      return std::nullopt;
    return name_of(i->second);
  }

private:
  workflow_spec<State, Step> spec_;
  std::map<std::string, Step> by_name_;
};

} // namespace cmdbus
