#include "cmdbus/process/process_actor.hpp"

#include <caf/all.hpp>

#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = process_actor::stateful_pointer<process_actor_state>;

void next(self_ptr self);

// The front reply is dealt with: the router gets its credit back.
void done_with_front(self_ptr self) {
  auto& st = self->state;
  auto msg_id = st.replies.front().msg_id;
  st.replies.pop_front();
  st.busy = false;
  self->send(st.router, atom::committed::value, st.process_id, msg_id);
  next(self);
}

void next(self_ptr self) {
  auto& st = self->state;
  if (st.busy || st.replies.empty())
    return;
  st.busy = true;
  self
    ->request(st.writer, caf::infinite, atom::apply::value, st.replies.front())
    .then(
      [self](apply_outcome& o) {
        auto& st = self->state;
        if (o.kind == apply_kind::retry) {
          // The database is unavailable: the same reply again later.
          auto delay = std::max(o.retry_after, std::chrono::milliseconds{10});
          self->delayed_send(self, delay, atom::retry_due::value);
          return;
        }
        auto& m = st.replies.front();
        log::from(st.name).debug(
          "{}: reply msg_id {} ({}) for process {}: {} ({}){}", st.name,
          m.msg_id, to_string(m.r.outcome), st.process_id.to_string(),
          to_string(o.kind), o.note,
          o.status ? ", now " + std::string{to_string(*o.status)} : "");
        done_with_front(self);
      },
      [self](caf::error& err) {
        // The writer died: the reply's message reappears after its
        // visibility timeout and comes again.
        auto& st = self->state;
        log::from(st.name).warn("{}: the writer of process {} failed ({}); "
                                "reply msg_id {} comes again after its "
                                "visibility timeout",
                                st.name, st.process_id.to_string(),
                                to_string(err), st.replies.front().msg_id);
        done_with_front(self);
      });
}

} // namespace

process_actor::behavior_type
process_actor_behavior(self_ptr self, uuid process_id, std::string domain,
                       process_router_actor router, process_writer_actor writer,
                       std::chrono::milliseconds idle_after) {
  auto& st = self->state;
  st.process_id = process_id;
  st.router = std::move(router);
  st.writer = std::move(writer);
  st.name = "process/" + domain;
  return {
    [self](atom::handle, process_reply_message& m) {
      self->state.replies.push_back(std::move(m));
      next(self);
    },
    [self](atom::stop) { self->quit(); },
    [self](atom::retry_due) {
      auto& st = self->state;
      st.busy = false;
      next(self);
    },
    caf::after(idle_after) >>
      [self] {
        auto& st = self->state;
        if (!st.busy && st.replies.empty())
          self->send(st.router, atom::idle::value, st.process_id);
      },
  };
}

} // namespace cmdbus::actors
