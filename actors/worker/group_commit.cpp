#include "cmdbus/actors/worker/group_commit.hpp"

namespace cmdbus::actors {

void count_stale(const std::string& who, const domain_settings& settings,
                 size_t stale) {
  if (stale == 0)
    return;
  settings.counters->stale += static_cast<int64_t>(stale);
  log::from(who).info(
    "{}: {} outcome(s) not written: another delivery owns their "
    "message now",
    who, stale);
}

bool refused_for_content(const std::exception& e) {
  auto* err = dynamic_cast<const db::error*>(&e);
  if (err == nullptr)
    return dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
  auto cls = err->sqlstate().substr(0, 2);
  return cls == "22" || cls == "23";
}

} // namespace cmdbus::actors
