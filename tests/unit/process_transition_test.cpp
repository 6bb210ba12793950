// The transition engine alone (process/transition.hpp): what each reply does
// to a process of the example order type, fed through a small in-memory
// stand-in for the store that writes what `decide` says (the database tests
// in tests/db/process_store_test.cpp check the store writes the same).

#include "cmdbus/process/transition.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmdbus/model/wire.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;
using namespace cmdbus::process_test;

namespace {

// A process in memory: started like the store starts one, and changed like
// the store changes one.
class process_sim {
public:
  explicit process_sim(const workflow& w, json input = order_input()) : w_(w) {
    p.domain = "shop";
    p.process_id = uuid::random();
    p.process_type = w.process_type();
    p.state = w.initial_state(input);
    auto first = w.first_step(p.state);
    p.status = process_status::waiting;
    p.current_step = first;
    sent.push_back({first, w.command_for(first, p.state)});
    add_row(sent.back());
  }

  transition feed(const reply& r) {
    auto t = decide(p, trail, r, w_);
    if (t.record_reply)
      for (auto& row : trail)
        if (row.command_id == r.command_id) {
          row.outcome = r.outcome;
          row.reply_data = t.reply_data;
        }
    if (!t.changed())
      return t;
    p.status = t.status;
    p.current_step = t.current_step;
    p.state = t.state;
    p.error_code = t.error_code;
    p.error_message = t.error_message;
    if (t.completed)
      p.completed_at = timestamp{};
    if (t.send) {
      sent.push_back(*t.send);
      add_row(*t.send);
    }
    return t;
  }

  const uuid& current() const {
    return trail.back().command_id;
  }

  // The steps sent so far, in order.
  std::vector<std::string> steps() const {
    std::vector<std::string> out;
    for (auto& s : sent)
      out.push_back(s.step);
    return out;
  }

  process_metadata p;
  std::vector<process_audit_entry> trail;
  std::vector<step_send> sent;

private:
  void add_row(const step_send& s) {
    process_audit_entry e;
    e.step_name = s.step;
    e.command_id = uuid::random();
    e.command_type = s.command.command_type;
    e.command_data = s.command.data;
    trail.push_back(std::move(e));
  }

  const workflow& w_;
};

reply success(const uuid& id, const std::string& result = "null") {
  reply r;
  r.command_id = id;
  r.outcome = reply_outcome::success;
  r.result = json::parse(result);
  return r;
}

// A FAILED reply as the reference's worker sends it: the error fields only
// inside `result`.
reply failed(const uuid& id, const std::string& code = "NO_FUNDS",
             const std::string& message = "insufficient funds") {
  return wire::decode_reply(R"({"command_id":")" + id.to_string()
                            + R"(","correlation_id":null,"outcome":"FAILED",)"
                              R"("result":{"error_code":")"
                            + code + R"(","error_message":")" + message
                            + R"(","error_details":{"balance":3}}})");
}

reply canceled(const uuid& id, const std::string& reason = "duplicate") {
  reply r;
  r.command_id = id;
  r.outcome = reply_outcome::canceled;
  r.reason = reason;
  return r;
}

using strings = std::vector<std::string>;

// -- going forward ------------------------------------------------------------

TEST(process_transition, success_replies_walk_the_steps_to_completed) {
  process_sim s{order_workflow()};
  auto t = s.feed(success(s.current(), R"({"reservation_id":"r-1"})"));
  EXPECT_EQ(t.disposition, reply_disposition::applied);
  EXPECT_TRUE(t.record_reply);
  EXPECT_EQ(t.status, process_status::waiting);
  EXPECT_EQ(t.current_step, "Debit");
  ASSERT_TRUE(t.send);
  EXPECT_EQ(t.send->command.command_type, "DebitAccount");
  EXPECT_FALSE(t.completed);
  EXPECT_EQ(from_json(t.state).reservation, "r-1");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.current_step, "Notify");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::completed);
  EXPECT_TRUE(t.completed);
  EXPECT_FALSE(t.send);
  EXPECT_EQ(t.current_step, "Notify");
  EXPECT_EQ(s.steps(), (strings{"Reserve", "Debit", "Notify"}));
  auto st = from_json(s.p.state);
  EXPECT_TRUE(st.debited);
  EXPECT_TRUE(st.notified);
  EXPECT_FALSE(s.p.error_code);
}

TEST(process_transition, reply_data_is_the_result) {
  process_sim s{order_workflow()};
  auto t = s.feed(success(s.current(), R"({"reservation_id":"r-1"})"));
  ASSERT_TRUE(t.reply_data);
  EXPECT_EQ(t.reply_data->text(), R"({"reservation_id":"r-1"})");
  t = s.feed(success(s.current()));
  EXPECT_FALSE(t.reply_data); // a null result is stored as NULL
}

TEST(process_transition, waiting_for_tsq_resumes_on_success) {
  process_sim s{order_workflow()};
  s.p.status = process_status::waiting_for_tsq; // an operator's tsq complete
  auto t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::waiting);
  EXPECT_EQ(t.current_step, "Debit");
}

// -- a failed step ------------------------------------------------------------

TEST(process_transition, failed_step_compensates_one_at_a_time_in_reverse) {
  process_sim s{order_workflow()};
  s.feed(success(s.current(), R"({"reservation_id":"r-1"})"));
  s.feed(success(s.current()));
  auto t = s.feed(failed(s.current()));
  EXPECT_EQ(t.status, process_status::compensating);
  EXPECT_EQ(t.current_step, "Refund");
  ASSERT_TRUE(t.send);
  EXPECT_EQ(t.send->command.command_type, "RefundAccount");
  EXPECT_EQ(t.error_code, "NO_FUNDS"); // from inside `result`
  EXPECT_EQ(t.error_message, "insufficient funds");
  EXPECT_FALSE(t.completed);
  // Only the first compensation is out.
  EXPECT_EQ(s.steps(), (strings{"Reserve", "Debit", "Notify", "Refund"}));
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::compensating);
  EXPECT_EQ(t.current_step, "Release");
  ASSERT_TRUE(t.send);
  EXPECT_EQ(t.send->command.data.text(),
            R"({"order_id":"o-1","reservation_id":"r-1"})");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::canceled);
  EXPECT_TRUE(t.completed);
  EXPECT_FALSE(t.send);
  EXPECT_EQ(t.error_code, "NO_FUNDS"); // kept
  EXPECT_EQ(s.steps(),
            (strings{"Reserve", "Debit", "Notify", "Refund", "Release"}));
  auto st = from_json(s.p.state);
  EXPECT_FALSE(st.debited);
  EXPECT_FALSE(st.reservation);
}

TEST(process_transition, failed_reply_data_is_the_reference_result_object) {
  process_sim s{order_workflow()};
  auto t = s.feed(failed(s.current()));
  ASSERT_TRUE(t.reply_data);
  EXPECT_EQ(t.reply_data->text(),
            R"({"error_code":"NO_FUNDS","error_message":"insufficient )"
            R"(funds","error_details":{"balance":3}})");
}

TEST(process_transition, error_fields_at_top_level_are_read_too) {
  process_sim s{order_workflow()};
  auto r = wire::decode_reply(
    R"({"command_id":")" + s.current().to_string()
    + R"(","correlation_id":null,"outcome":"FAILED","error_code":"LIMIT",)"
      R"("error_message":"over the limit"})");
  auto t = s.feed(r);
  EXPECT_EQ(t.error_code, "LIMIT");
  EXPECT_EQ(t.error_message, "over the limit");
}

TEST(process_transition, failed_first_step_ends_canceled_at_once) {
  process_sim s{order_workflow()};
  auto t = s.feed(failed(s.current()));
  EXPECT_EQ(t.status, process_status::canceled);
  EXPECT_TRUE(t.completed);
  EXPECT_FALSE(t.send);
  EXPECT_EQ(t.error_code, "NO_FUNDS");
  EXPECT_EQ(from_json(t.state).last_error, "NO_FUNDS"); // update_state ran
}

TEST(process_transition, steps_without_compensation_are_skipped) {
  auto spec = order_spec();
  spec.compensation_for.erase(order_step::debit);
  workflow_definition<order_state, order_step> w{spec};
  process_sim s{w};
  s.feed(success(s.current()));
  s.feed(success(s.current()));
  auto t = s.feed(failed(s.current()));
  EXPECT_EQ(t.current_step, "Release");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::canceled);
}

// -- an operator's cancel -----------------------------------------------------

TEST(process_transition, canceled_step_compensates_and_ends_compensated) {
  process_sim s{order_workflow()};
  s.feed(success(s.current()));
  auto before = s.p.state;
  auto t = s.feed(canceled(s.current()));
  EXPECT_EQ(t.status, process_status::compensating);
  EXPECT_EQ(t.current_step, "Release");
  EXPECT_EQ(t.state, before); // update_state is not called for CANCELED
  EXPECT_FALSE(t.reply_data);
  EXPECT_FALSE(t.error_code);
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::compensated);
  EXPECT_TRUE(t.completed);
  EXPECT_FALSE(t.error_code);
}

TEST(process_transition, waiting_for_tsq_compensates_on_cancel) {
  process_sim s{order_workflow()};
  s.feed(success(s.current()));
  s.p.status = process_status::waiting_for_tsq;
  auto t = s.feed(canceled(s.current()));
  EXPECT_EQ(t.status, process_status::compensating);
  EXPECT_EQ(t.current_step, "Release");
}

// -- a failed compensation ----------------------------------------------------

TEST(process_transition, failed_compensation_ends_failed_with_its_error) {
  process_sim s{order_workflow()};
  s.feed(success(s.current()));
  s.feed(success(s.current()));
  s.feed(failed(s.current()));
  auto t = s.feed(failed(s.current(), "REFUND_REJECTED", "account closed"));
  EXPECT_EQ(t.status, process_status::failed);
  EXPECT_TRUE(t.completed);
  EXPECT_FALSE(t.send);
  EXPECT_EQ(t.error_code, "REFUND_REJECTED");
  EXPECT_EQ(t.error_message, "account closed");
  // Release never ran.
  EXPECT_EQ(s.steps(), (strings{"Reserve", "Debit", "Notify", "Refund"}));
}

TEST(process_transition, canceled_compensation_ends_failed) {
  process_sim s{order_workflow()};
  s.feed(success(s.current()));
  s.feed(canceled(s.current()));
  auto t = s.feed(canceled(s.current(), "stock gone"));
  EXPECT_EQ(t.status, process_status::failed);
  EXPECT_TRUE(t.completed);
  EXPECT_EQ(t.error_code, "COMPENSATION_CANCELED");
  EXPECT_EQ(t.error_message, "stock gone");
}

// -- the plan comes from the trail --------------------------------------------

TEST(process_transition, compensation_plan_is_derived_from_the_trail) {
  // A process as read back after a restart: Reserve and Debit succeeded,
  // Notify failed, Refund is out.
  process_sim s{order_workflow()};
  auto row = [](const char* step, std::optional<reply_outcome> o) {
    process_audit_entry e;
    e.step_name = step;
    e.command_id = uuid::random();
    e.command_type = "X";
    e.outcome = o;
    return e;
  };
  s.trail = {row("Reserve", reply_outcome::success),
             row("Debit", reply_outcome::success),
             row("Notify", reply_outcome::failed), row("Refund", std::nullopt)};
  s.p.status = process_status::compensating;
  s.p.current_step = "Refund";
  auto t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::compensating);
  EXPECT_EQ(t.current_step, "Release");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::canceled);
}

TEST(process_transition, a_step_run_twice_is_compensated_twice) {
  // Debit runs again while its reply asks for it.
  auto spec = order_spec();
  spec.next_step = [](order_step step, const reply& r, const order_state&) {
    if (step == order_step::debit && r.result.text() == R"({"again":true})")
      return std::optional<order_step>{order_step::debit};
    return next(step, r, order_state{});
  };
  workflow_definition<order_state, order_step> w{spec};
  process_sim s{w};
  s.feed(success(s.current()));
  s.feed(success(s.current(), R"({"again":true})"));
  s.feed(success(s.current()));
  auto t = s.feed(failed(s.current()));
  EXPECT_EQ(t.current_step, "Refund");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.current_step, "Refund");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.current_step, "Release");
  t = s.feed(success(s.current()));
  EXPECT_EQ(t.status, process_status::canceled);
  EXPECT_EQ(s.steps(), (strings{"Reserve", "Debit", "Debit", "Notify", "Refund",
                                "Refund", "Release"}));
}

// -- replies that change nothing ----------------------------------------------

TEST(process_transition, duplicate_reply_changes_nothing) {
  process_sim s{order_workflow()};
  auto first = s.current();
  s.feed(success(first));
  auto before = s.p;
  auto t = s.feed(success(first));
  EXPECT_EQ(t.disposition, reply_disposition::already_answered);
  EXPECT_FALSE(t.record_reply);
  EXPECT_FALSE(t.changed());
  EXPECT_FALSE(t.send);
  EXPECT_EQ(s.p.status, before.status);
  EXPECT_EQ(s.p.current_step, "Debit");
  // Also a contradicting second reply.
  t = s.feed(failed(first));
  EXPECT_EQ(t.disposition, reply_disposition::already_answered);
  EXPECT_EQ(s.p.status, process_status::waiting);
}

TEST(process_transition, unknown_command_changes_nothing) {
  process_sim s{order_workflow()};
  auto t = s.feed(success(uuid::random()));
  EXPECT_EQ(t.disposition, reply_disposition::unknown_command);
  EXPECT_FALSE(t.record_reply);
  EXPECT_FALSE(t.changed());
}

TEST(process_transition, terminal_process_records_the_reply_only) {
  // The reference sends every compensation at once and marks the process
  // COMPENSATED; their replies arrive afterwards. The reference then runs
  // the step logic and can flip the process to COMPLETED; we don't.
  process_sim s{order_workflow()};
  s.feed(success(s.current()));
  s.feed(success(s.current()));
  s.feed(canceled(s.current()));
  auto refund = s.current();
  s.p.status = process_status::compensated; // as the reference leaves it
  auto t = s.feed(success(refund));
  EXPECT_EQ(t.disposition, reply_disposition::terminal_process);
  EXPECT_TRUE(t.record_reply);
  EXPECT_EQ(t.outcome, reply_outcome::success);
  EXPECT_FALSE(t.changed());
  EXPECT_FALSE(t.send);
  EXPECT_EQ(t.status, process_status::compensated);
  EXPECT_EQ(s.p.status, process_status::compensated);
  EXPECT_EQ(s.trail.back().outcome, reply_outcome::success);
}

TEST(process_transition, completed_process_never_moves_again) {
  process_sim s{order_workflow()};
  for (int i = 0; i < 3; ++i)
    s.feed(success(s.current()));
  ASSERT_EQ(s.p.status, process_status::completed);
  for (auto& r : {success(s.current()), failed(s.current()),
                  canceled(s.current()), success(uuid::random())}) {
    auto t = s.feed(r);
    EXPECT_FALSE(t.changed());
    EXPECT_FALSE(t.record_reply);
    EXPECT_EQ(s.p.status, process_status::completed);
  }
}

TEST(process_transition, reply_for_an_earlier_command_is_recorded_only) {
  process_sim s{order_workflow()};
  auto first = s.current();
  // An earlier command that never got its reply (e.g. written by the
  // reference, which sends compensations all at once).
  s.feed(success(first));
  s.trail.front().outcome.reset();
  auto t = s.feed(failed(first));
  EXPECT_EQ(t.disposition, reply_disposition::not_current_command);
  EXPECT_TRUE(t.record_reply);
  EXPECT_FALSE(t.changed());
  EXPECT_EQ(s.p.status, process_status::waiting);
  EXPECT_EQ(s.p.current_step, "Debit");
}

TEST(process_transition, dispositions_have_names) {
  EXPECT_EQ(to_string(reply_disposition::applied), "applied");
  EXPECT_EQ(to_string(reply_disposition::unknown_process), "unknown_process");
  EXPECT_EQ(to_string(reply_disposition::terminal_process), "terminal_process");
}

// -- the troubleshooting queue and batches ------------------------------------

TEST(process_transition, waiting_process_with_command_in_tsq_waits_for_tsq) {
  EXPECT_TRUE(should_wait_for_tsq(process_status::waiting,
                                  command_status::in_troubleshooting_queue));
  EXPECT_FALSE(
    should_wait_for_tsq(process_status::waiting, command_status::in_progress));
  EXPECT_FALSE(should_wait_for_tsq(process_status::compensated,
                                   command_status::in_troubleshooting_queue));
  EXPECT_FALSE(should_wait_for_tsq(process_status::waiting_for_tsq,
                                   command_status::in_troubleshooting_queue));
}

TEST(process_transition, batch_deltas) {
  using ps = process_status;
  auto d = batch_delta_for(ps::waiting, ps::completed);
  EXPECT_EQ(d.completed, 1);
  EXPECT_EQ(d.canceled, 0);
  d = batch_delta_for(ps::compensating, ps::compensated);
  EXPECT_EQ(d.completed, 1);
  d = batch_delta_for(ps::compensating, ps::canceled);
  EXPECT_EQ(d.canceled, 1);
  d = batch_delta_for(ps::compensating, ps::failed);
  EXPECT_EQ(d.canceled, 1);
  d = batch_delta_for(ps::waiting, ps::waiting_for_tsq);
  EXPECT_EQ(d.in_troubleshooting, 1);
  d = batch_delta_for(ps::waiting_for_tsq, ps::waiting);
  EXPECT_EQ(d.in_troubleshooting, -1);
  d = batch_delta_for(ps::waiting_for_tsq, ps::canceled);
  EXPECT_EQ(d.in_troubleshooting, -1);
  EXPECT_EQ(d.canceled, 1);
  EXPECT_TRUE(batch_delta_for(ps::waiting, ps::waiting).empty());
  EXPECT_TRUE(batch_delta_for(ps::waiting, ps::compensating).empty());
}

} // namespace
