#pragma once

// The payments domain: its command types, the data they carry, and the
// Payment process (Debit, then FraudCheck; a refused check reverses the
// Debit). No CAF here: payments-send uses it with the send API only.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <cmdbus/model/json.hpp>
#include <cmdbus/process/workflow.hpp>

namespace payments {

/// Takes `amount_cents` from `account` (a negative amount gives it back).
inline constexpr const char* debit_type = "Debit";

/// Refuses (a business-rule failure) amounts above fraud_limit_cents.
inline constexpr const char* fraud_check_type = "FraudCheck";

/// The process type: Debit, then FraudCheck; when the check refuses the
/// payment, the Debit is undone by a Debit of the opposite amount.
inline constexpr const char* payment_type = "Payment";

/// The largest amount the fraud check lets through.
inline constexpr int64_t fraud_limit_cents = 100000;

/// The data of a Debit or FraudCheck command, and the input of a Payment:
/// {"account": ..., "amount_cents": ...}.
cmdbus::json payment_data(const std::string& account, int64_t amount_cents);

/// The account and amount of `data`; nothing when either is missing.
struct payment_fields {
  std::string account;
  int64_t amount_cents = 0;
};
std::optional<payment_fields> read_payment(const cmdbus::json& data);

/// The Payment process type.
std::shared_ptr<const cmdbus::workflow> payment_workflow();

} // namespace payments
