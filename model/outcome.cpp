#include "cmdbus/model/outcome.hpp"

namespace cmdbus {

const char* to_string(outcome_kind x) noexcept {
  switch (x) {
    case outcome_kind::success: return "SUCCESS";
    case outcome_kind::transient: return "TRANSIENT";
    case outcome_kind::permanent: return "PERMANENT";
    case outcome_kind::business_rule: return "BUSINESS_RULE";
  }
  return "TRANSIENT";
}

} // namespace cmdbus
