#include "fraud_check.hpp"

#include <string>

#include "payment.hpp"

namespace payments {

cmdbus::command_handler_actor::behavior_type fraud_check() {
  return {
    [](cmdbus::atom::handle, const cmdbus::received_command& rc) {
      cmdbus::outcome out;
      auto p = read_payment(rc.cmd.data);
      if (!p) {
        out.kind = cmdbus::outcome_kind::permanent;
        out.error_code = "BAD_PAYMENT";
        out.error_message = "a FraudCheck needs an account and amount_cents";
      } else if (p->amount_cents > fraud_limit_cents) {
        out.kind = cmdbus::outcome_kind::business_rule;
        out.error_code = "FRAUD_SUSPECTED";
        out.error_message = "amount above " + std::to_string(fraud_limit_cents)
                            + " cents";
      } else {
        out.result = cmdbus::json::parse(R"({"approved": true})");
      }
      return out;
    },
  };
}

} // namespace payments
