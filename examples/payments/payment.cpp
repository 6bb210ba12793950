#include "payment.hpp"

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <cmdbus/model/types.hpp>

namespace payments {

namespace {

// The example keeps to the standard library: these two readers know just
// the flat objects it writes itself. An application uses its own JSON
// library on cmdbus::json::text().

// The text after `"key":` in a flat object, or an empty view.
std::string_view value_of(std::string_view text, std::string_view key) {
  auto quoted = "\"" + std::string{key} + "\"";
  auto at = text.find(quoted);
  if (at == std::string_view::npos)
    return {};
  auto rest = text.substr(at + quoted.size());
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest[0])))
    rest.remove_prefix(1);
  if (rest.empty() || rest[0] != ':')
    return {};
  rest.remove_prefix(1);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest[0])))
    rest.remove_prefix(1);
  return rest;
}

std::optional<std::string> string_field(const cmdbus::json& object,
                                        std::string_view key) {
  auto v = value_of(object.text(), key);
  if (v.empty() || v[0] != '"')
    return std::nullopt;
  auto end = v.find('"', 1);
  if (end == std::string_view::npos)
    return std::nullopt;
  return std::string{v.substr(1, end - 1)};
}

std::optional<int64_t> int_field(const cmdbus::json& object,
                                 std::string_view key) {
  auto v = std::string{value_of(object.text(), key)};
  if (v.empty())
    return std::nullopt;
  char* end = nullptr;
  auto n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str())
    return std::nullopt;
  return static_cast<int64_t>(n);
}

// Account names are letters, digits, '-' and '_' (nothing to escape).
bool valid_account(const std::string& account) {
  if (account.empty())
    return false;
  for (unsigned char c : account)
    if (!std::isalnum(c) && c != '-' && c != '_')
      return false;
  return true;
}

// The Payment process.

enum class step { debit, fraud_check, reverse_debit };

struct state {
  payment_fields payment;
  // What the steps answered.
  bool debited = false;
  std::string refusal;
};

cmdbus::json to_json(const state& s) {
  auto text = payment_data(s.payment.account, s.payment.amount_cents).text();
  text.pop_back(); // the closing brace
  text += std::string{",\"debited\":"} + (s.debited ? "true" : "false")
          + ",\"refusal\":\"" + s.refusal + "\"}";
  return cmdbus::json::parse(text);
}

state from_json(const cmdbus::json& j) {
  state s;
  s.payment = read_payment(j).value_or(payment_fields{});
  s.debited = j.text().find("\"debited\":true") != std::string::npos;
  s.refusal = string_field(j, "refusal").value_or("");
  return s;
}

} // namespace

cmdbus::json payment_data(const std::string& account, int64_t amount_cents) {
  if (!valid_account(account))
    throw std::invalid_argument{"account names are letters, digits, '-' and "
                                "'_': '"
                                + account + "'"};
  return cmdbus::json::parse("{\"account\":\"" + account
                             + "\",\"amount_cents\":"
                             + std::to_string(amount_cents) + "}");
}

std::optional<payment_fields> read_payment(const cmdbus::json& data) {
  auto account = string_field(data, "account");
  auto amount = int_field(data, "amount_cents");
  if (!account || !amount)
    return std::nullopt;
  return payment_fields{*account, *amount};
}

std::shared_ptr<const cmdbus::workflow> payment_workflow() {
  cmdbus::workflow_spec<state, step> spec;
  spec.process_type = payment_type;
  spec.steps = {{step::debit, "Debit"},
                {step::fraud_check, "FraudCheck"},
                {step::reverse_debit, "ReverseDebit"}};
  spec.to_json = to_json;
  spec.from_json = from_json;
  spec.initial_state = [](const cmdbus::json& input) {
    auto p = read_payment(input);
    if (!p || p->amount_cents <= 0)
      throw std::invalid_argument{
        "a Payment needs an account and a positive amount_cents"};
    state s;
    s.payment = *p;
    return s;
  };
  spec.first_step = [](const state&) { return step::debit; };
  spec.command_for = [](step st, const state& s) {
    const auto& p = s.payment;
    switch (st) {
      case step::debit:
        return cmdbus::step_command{debit_type,
                                    payment_data(p.account, p.amount_cents)};
      case step::fraud_check:
        return cmdbus::step_command{fraud_check_type,
                                    payment_data(p.account, p.amount_cents)};
      case step::reverse_debit: break;
    }
    return cmdbus::step_command{debit_type,
                                payment_data(p.account, -p.amount_cents)};
  };
  spec.update_state = [](state& s, step st, const cmdbus::reply& r) {
    if (r.outcome == cmdbus::reply_outcome::failed) {
      s.refusal = r.error_code.value_or("FAILED");
      return;
    }
    if (st == step::debit)
      s.debited = true;
    if (st == step::reverse_debit)
      s.debited = false;
  };
  spec.next_step = [](step st, const cmdbus::reply&,
                      const state&) -> std::optional<step> {
    if (st == step::debit)
      return step::fraud_check;
    return std::nullopt;
  };
  spec.compensation_for = {{step::debit, step::reverse_debit}};
  return std::make_shared<cmdbus::workflow_definition<state, step>>(
    std::move(spec));
}

} // namespace payments
