#include "cmdbus/process/workflow.hpp"

namespace cmdbus {

workflow::~workflow() {
  // nop
}

std::optional<std::string>
workflow::compensation_for(const std::string&) const {
  return std::nullopt;
}

} // namespace cmdbus
