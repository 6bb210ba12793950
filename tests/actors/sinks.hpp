#pragma once

// Fakes of a supervisor's poller and completion writer for the actor tests:
// they take every message and do nothing (the tests check what arrives with
// expect()).

#include "cmdbus/actors/interfaces.hpp"

namespace cmdbus::actors::test {

inline poller_actor::behavior_type poller_sink(poller_actor::pointer) {
  return {
    [](atom::credit, int64_t) {},
    [](atom::credit, const std::string&, int64_t) {},
    [](atom::wakeup) {},
  };
}

inline completion_actor::behavior_type
completion_sink(completion_actor::pointer) {
  return {
    [](atom::finish, const db::finished_command&) {},
    [](atom::flush) {},
  };
}

} // namespace cmdbus::actors::test
