#include "cmdbus/actors/worker/group_commit.hpp"

namespace cmdbus::actors {

void count_unwritten(const std::string& who, const domain_settings& settings,
                     size_t stale, size_t already_written) {
  if (already_written > 0)
    log::from(who).info(
      "{}: {} outcome(s) were in the database already: an earlier attempt "
      "of this write committed although its answer was lost",
      who, already_written);
  if (stale == 0)
    return;
  settings.metrics->stale += static_cast<int64_t>(stale);
  log::from(who).info(
    "{}: {} outcome(s) not written: their delivery no longer holds its "
    "message (read again since, or its claim was lost)",
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
