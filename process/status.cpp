#include "cmdbus/process/status.hpp"

#include <array>
#include <utility>

namespace cmdbus {

namespace {

constexpr std::array<std::pair<process_status, std::string_view>, 9> names{{
  {process_status::pending, "PENDING"},
  {process_status::in_progress, "IN_PROGRESS"},
  {process_status::waiting, "WAITING"},
  {process_status::waiting_for_tsq, "WAITING_FOR_TSQ"},
  {process_status::compensating, "COMPENSATING"},
  {process_status::completed, "COMPLETED"},
  {process_status::compensated, "COMPENSATED"},
  {process_status::failed, "FAILED"},
  {process_status::canceled, "CANCELED"},
}};

} // namespace

std::string_view to_string(process_status x) noexcept {
  for (auto& [status, name] : names)
    if (status == x)
      return name;
  return "?";
}

std::optional<process_status>
parse_process_status(std::string_view x) noexcept {
  for (auto& [status, name] : names)
    if (name == x)
      return status;
  return std::nullopt;
}

bool is_terminal(process_status x) noexcept {
  switch (x) {
    case process_status::completed:
    case process_status::compensated:
    case process_status::failed:
    case process_status::canceled: return true;
    default: return false;
  }
}

} // namespace cmdbus
