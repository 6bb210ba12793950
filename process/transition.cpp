#include "cmdbus/process/transition.hpp"

#include <map>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace cmdbus {

namespace {

using trail_t = std::vector<process_audit_entry>;

bool is_failure(const std::optional<reply_outcome>& x) {
  return x && (*x == reply_outcome::failed || *x == reply_outcome::canceled);
}

// The row whose failure started the compensation: the first one answered
// FAILED or CANCELED (the rows after it are compensations); none while the
// process goes forward.
std::optional<size_t> trigger_of(const trail_t& trail) {
  for (size_t i = 0; i < trail.size(); ++i)
    if (is_failure(trail[i].outcome))
      return i;
  return std::nullopt;
}

// Sends the next compensation, or ends the process in `final_status` when
// none is left. The plan: the compensations of the forward steps answered
// SUCCESS, latest first; those whose compensation already succeeded are
// done (counted, so that a step run twice is compensated twice).
void compensate(transition& t, const trail_t& trail, size_t trigger,
                const workflow& w, process_status final_status) {
  std::map<std::string, int> done;
  for (size_t i = trigger + 1; i < trail.size(); ++i)
    if (trail[i].outcome == reply_outcome::success)
      ++done[trail[i].step_name];
  for (size_t i = trigger; i-- > 0;) {
    if (trail[i].outcome != reply_outcome::success)
      continue;
    auto comp = w.compensation_for(trail[i].step_name);
    if (!comp)
      continue;
    auto d = done.find(*comp);
    if (d != done.end() && d->second > 0) {
      --d->second;
      continue;
    }
    t.status = process_status::compensating;
    t.current_step = *comp;
    t.send = step_send{*comp, w.command_for(*comp, t.state)};
    return;
  }
  t.status = final_status;
  t.completed = true;
}

// The reply `r` to the current step `step` of a process going forward.
void forward(transition& t, trail_t& trail, size_t row, const reply& r,
             const workflow& w) {
  const auto& step = trail[row].step_name;
  switch (r.outcome) {
    case reply_outcome::success: {
      t.state = w.update_state(t.state, step, r);
      auto next = w.next_step(step, r, t.state);
      if (!next) {
        t.status = process_status::completed;
        t.completed = true;
        return;
      }
      t.status = process_status::waiting;
      t.current_step = *next;
      t.send = step_send{*next, w.command_for(*next, t.state)};
      return;
    }
    case reply_outcome::failed:
      t.state = w.update_state(t.state, step, r);
      t.error_code = r.error_code;
      t.error_message = r.error_message;
      compensate(t, trail, row, w, process_status::canceled);
      return;
    case reply_outcome::canceled:
      compensate(t, trail, row, w, process_status::compensated);
      return;
  }
}

// The reply `r` to the current compensation step of a process compensating
// since the row `trigger`.
void backward(transition& t, trail_t& trail, size_t trigger, size_t row,
              const reply& r, const workflow& w) {
  const auto& step = trail[row].step_name;
  switch (r.outcome) {
    case reply_outcome::success: {
      t.state = w.update_state(t.state, step, r);
      auto final_status = trail[trigger].outcome == reply_outcome::failed
                            ? process_status::canceled
                            : process_status::compensated;
      compensate(t, trail, trigger, w, final_status);
      return;
    }
    case reply_outcome::failed:
      t.state = w.update_state(t.state, step, r);
      t.status = process_status::failed;
      t.completed = true;
      t.error_code = r.error_code.value_or("COMPENSATION_FAILED");
      t.error_message = r.error_message.value_or("compensation step " + step
                                                 + " failed");
      return;
    case reply_outcome::canceled:
      t.status = process_status::failed;
      t.completed = true;
      t.error_code = "COMPENSATION_CANCELED";
      t.error_message = r.reason.value_or("compensation step " + step
                                          + " was canceled");
      return;
  }
}

} // namespace

std::string_view to_string(reply_disposition x) noexcept {
  switch (x) {
    case reply_disposition::applied: return "applied";
    case reply_disposition::unknown_process: return "unknown_process";
    case reply_disposition::unknown_command: return "unknown_command";
    case reply_disposition::already_answered: return "already_answered";
    case reply_disposition::terminal_process: return "terminal_process";
    case reply_disposition::not_current_command: return "not_current_command";
  }
  return "?";
}

transition decide(const process_metadata& p, const trail_t& trail,
                  const reply& r, const workflow& w) {
  transition t;
  t.status = p.status;
  t.current_step = p.current_step;
  t.state = p.state;
  t.error_code = p.error_code;
  t.error_message = p.error_message;
  t.outcome = r.outcome;
  // The latest row of the command (a command id appears once in our
  // trails; the latest is the one that can still be waiting).
  std::optional<size_t> row;
  for (size_t i = trail.size(); i-- > 0;)
    if (trail[i].command_id == r.command_id) {
      row = i;
      break;
    }
  if (!row) {
    t.disposition = reply_disposition::unknown_command;
    return t;
  }
  if (trail[*row].outcome) {
    t.disposition = reply_disposition::already_answered;
    return t;
  }
  t.record_reply = true;
  t.reply_data = reply_data_of(r);
  if (is_terminal(p.status)) {
    t.disposition = reply_disposition::terminal_process;
    return t;
  }
  if (*row + 1 != trail.size() || !p.current_step
      || trail[*row].step_name != *p.current_step) {
    t.disposition = reply_disposition::not_current_command;
    return t;
  }
  auto trigger = trigger_of(trail);
  auto answered = trail;
  answered[*row].outcome = r.outcome;
  if (trigger)
    backward(t, answered, *trigger, *row, r, w);
  else
    forward(t, answered, *row, r, w);
  return t;
}

std::optional<json> reply_data_of(const reply& r) {
  if (r.outcome != reply_outcome::failed) {
    if (r.result.is_null())
      return std::nullopt;
    return r.result;
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  auto string_or_null = [&w](const std::optional<std::string>& x) {
    if (x)
      w.String(x->data(), static_cast<rapidjson::SizeType>(x->size()));
    else
      w.Null();
  };
  w.StartObject();
  w.Key("error_code");
  string_or_null(r.error_code);
  w.Key("error_message");
  string_or_null(r.error_message);
  w.Key("error_details");
  auto details = r.result.is_object() ? r.result.text() : json::object().text();
  w.RawValue(details.data(), details.size(), rapidjson::kObjectType);
  w.EndObject();
  return json{std::string{buf.GetString(), buf.GetSize()}, json::trusted};
}

bool should_wait_for_tsq(process_status status,
                         command_status command) noexcept {
  return status == process_status::waiting
         && command == command_status::in_troubleshooting_queue;
}

batch_delta batch_delta_for(process_status from, process_status to) noexcept {
  batch_delta d;
  if (from == to)
    return d;
  d.in_troubleshooting = (to == process_status::waiting_for_tsq ? 1 : 0)
                         - (from == process_status::waiting_for_tsq ? 1 : 0);
  if (!is_terminal(from) && is_terminal(to)) {
    if (to == process_status::completed || to == process_status::compensated)
      d.completed = 1;
    else
      d.canceled = 1;
  }
  return d;
}

} // namespace cmdbus
