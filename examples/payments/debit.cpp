#include "debit.hpp"

#include <string>

#include <cmdbus/model/errors.hpp>

#include "payment.hpp"

namespace payments {

cmdbus::json debit(const cmdbus::command& cmd, cmdbus::handler_context&) {
  auto p = read_payment(cmd.data);
  if (!p || p->amount_cents == 0)
    throw cmdbus::permanent_command_error{
      "BAD_PAYMENT", "a Debit needs an account and a non-zero amount_cents"};
  // A real handler calls the ledger here. Its answer becomes the command's
  // result, and the reply a process sees.
  auto text = payment_data(p->account, p->amount_cents).text();
  text.pop_back();
  text += ",\"debit_id\":\"D-" + cmd.command_id.to_string() + "\"}";
  return cmdbus::json::parse(text);
}

} // namespace payments
