#include "cmdbus/model/version.hpp"

namespace cmdbus {

const char* version() noexcept {
  return CMDBUS_VERSION;
}

} // namespace cmdbus
