#pragma once

// The example process type of the process tests (unit and database): an
// order that reserves stock, debits an account and notifies the customer;
// a reservation is released and a debit refunded when a later step fails.
// Written the way an application writes one: a typed state with its JSON
// form, a step enumeration with stored names, plain functions.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/process/workflow.hpp"

namespace cmdbus::process_test {

enum class order_step { reserve, debit, notify, release, refund };

struct order_state {
  std::string order_id;
  int64_t amount = 0;
  std::optional<std::string> reservation;
  bool debited = false;
  bool notified = false;
  /// The error code of the last FAILED reply.
  std::optional<std::string> last_error;
};

/// Writes a JSON object with `fill(writer)`.
template <class F>
json write_object(F fill) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  w.StartObject();
  fill(w);
  w.EndObject();
  return json::parse(std::string{buf.GetString(), buf.GetSize()});
}

inline rapidjson::Document parse_doc(const json& x) {
  rapidjson::Document doc;
  doc.Parse(x.text().c_str());
  return doc;
}

inline json to_json(const order_state& s) {
  return write_object([&](auto& w) {
    w.Key("order_id");
    w.String(s.order_id.c_str());
    w.Key("amount");
    w.Int64(s.amount);
    w.Key("reservation");
    if (s.reservation)
      w.String(s.reservation->c_str());
    else
      w.Null();
    w.Key("debited");
    w.Bool(s.debited);
    w.Key("notified");
    w.Bool(s.notified);
    w.Key("last_error");
    if (s.last_error)
      w.String(s.last_error->c_str());
    else
      w.Null();
  });
}

inline order_state from_json(const json& x) {
  auto doc = parse_doc(x);
  order_state s;
  s.order_id = doc["order_id"].GetString();
  s.amount = doc["amount"].GetInt64();
  if (doc["reservation"].IsString())
    s.reservation = doc["reservation"].GetString();
  s.debited = doc["debited"].GetBool();
  s.notified = doc["notified"].GetBool();
  if (doc["last_error"].IsString())
    s.last_error = doc["last_error"].GetString();
  return s;
}

inline order_state initial(const json& input) {
  auto doc = parse_doc(input);
  if (!doc.IsObject() || !doc.HasMember("order_id")
      || !doc["order_id"].IsString() || !doc.HasMember("amount")
      || !doc["amount"].IsInt64())
    throw std::invalid_argument("an order needs order_id and amount");
  order_state s;
  s.order_id = doc["order_id"].GetString();
  s.amount = doc["amount"].GetInt64();
  return s;
}

inline step_command command(order_step step, const order_state& s) {
  auto data = [&](bool with_amount) {
    return write_object([&](auto& w) {
      w.Key("order_id");
      w.String(s.order_id.c_str());
      if (with_amount) {
        w.Key("amount");
        w.Int64(s.amount);
      }
      if (step == order_step::release && s.reservation) {
        w.Key("reservation_id");
        w.String(s.reservation->c_str());
      }
    });
  };
  switch (step) {
    case order_step::reserve: return {"ReserveStock", data(true)};
    case order_step::debit: return {"DebitAccount", data(true)};
    case order_step::notify: return {"SendNotification", data(false)};
    case order_step::release: return {"ReleaseStock", data(false)};
    case order_step::refund: return {"RefundAccount", data(true)};
  }
  throw std::logic_error("unknown step");
}

inline void update(order_state& s, order_step step, const reply& r) {
  if (r.outcome == reply_outcome::failed) {
    s.last_error = r.error_code;
    return;
  }
  switch (step) {
    case order_step::reserve: {
      auto doc = parse_doc(r.result);
      if (doc.IsObject() && doc.HasMember("reservation_id")
          && doc["reservation_id"].IsString())
        s.reservation = doc["reservation_id"].GetString();
      break;
    }
    case order_step::debit: s.debited = true; break;
    case order_step::notify: s.notified = true; break;
    case order_step::release: s.reservation.reset(); break;
    case order_step::refund: s.debited = false; break;
  }
}

inline std::optional<order_step> next(order_step step, const reply&,
                                      const order_state&) {
  switch (step) {
    case order_step::reserve: return order_step::debit;
    case order_step::debit: return order_step::notify;
    default: return std::nullopt;
  }
}

inline workflow_spec<order_state, order_step> order_spec() {
  workflow_spec<order_state, order_step> spec;
  spec.process_type = "OrderFulfilment";
  spec.steps = {{order_step::reserve, "Reserve"},
                {order_step::debit, "Debit"},
                {order_step::notify, "Notify"},
                {order_step::release, "Release"},
                {order_step::refund, "Refund"}};
  spec.to_json = to_json;
  spec.from_json = from_json;
  spec.initial_state = initial;
  spec.first_step = [](const order_state&) { return order_step::reserve; };
  spec.command_for = command;
  spec.update_state = update;
  spec.next_step = next;
  spec.compensation_for = {{order_step::reserve, order_step::release},
                           {order_step::debit, order_step::refund}};
  return spec;
}

/// The example as the runtime sees it.
inline const workflow_definition<order_state, order_step>& order_workflow() {
  static const workflow_definition<order_state, order_step> w{order_spec()};
  return w;
}

/// The input of an example order.
inline json order_input(const std::string& order_id = "o-1",
                        int64_t amount = 250) {
  return write_object([&](auto& w) {
    w.Key("order_id");
    w.String(order_id.c_str());
    w.Key("amount");
    w.Int64(amount);
  });
}

} // namespace cmdbus::process_test
