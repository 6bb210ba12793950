#include "cmdbus/actors/worker/retry_scheduler.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/actors/worker/fault.hpp"

namespace cmdbus::actors {

void retry_scheduler_state::commit(pointer self, size_t n) {
  auto& st = self->state;
  std::vector<db::retry_command> items;
  auto res = write_prefix(st, n, items);
  maybe_crash(fault_point::after_commit);
  for_each_own(st, items, res.states, [&](const db::retry_command& x) {
    st.settings.metrics->of(x.rc.cmd.command_type).retried += 1;
  });
  self->send(st.parent, atom::committed::value, static_cast<int64_t>(n));
}

// Nothing is lost: the message becomes visible again when its visibility
// timeout ends, and the command runs again (its next attempt).
void retry_scheduler_state::refused(pointer self, const std::exception& e) {
  auto& st = self->state;
  auto& x = st.buffer.front();
  log::from(st.name).error(
    "{}: the database refused the retry of command {} (msg_id {}): "
    "{}; it runs again when its visibility timeout ends",
    st.name, x.rc.cmd.command_id.to_string(), x.rc.msg_id,
    log::one_line(e.what()));
  st.buffer.erase(st.buffer.begin());
  self->send(st.parent, atom::committed::value, int64_t{1});
}

namespace {

// Runs `step` (a lease request: an extension or a claim) on the writer's
// connection and answers with its result, or with an error that says
// `what` failed. While the database is failing it answers at once instead
// of waiting for a connection attempt per request.
template <class F>
auto lease_step(retry_scheduler_state::pointer self, const char* what,
                F step) -> caf::result<decltype(step())> {
  auto& st = self->state;
  if (st.session->outage().backing_off())
    return caf::make_error(ec::db_unavailable,
                           std::string{what}
                             + " failed: the database is unavailable");
  try {
    auto out = step();
    st.session->succeeded();
    return out;
  } catch (const std::exception& e) {
    st.on_failure(self, e);
    return caf::make_error(is_unavailable(e) ? ec::db_unavailable
                                             : ec::db_failed,
                           std::string{what} + " failed: "
                             + log::one_line(e.what()));
  }
}

} // namespace

retry_scheduler_actor::behavior_type
retry_scheduler(retry_scheduler_state::pointer self, domain_settings settings,
                writer_parent_actor parent, reschedule_fn write,
                extend_fn extend) {
  auto& st = self->state;
  if (write) {
    st.write = std::move(write);
  } else {
    st.write = [self](const std::vector<db::retry_command>& xs) {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      return store.reschedule(xs);
    };
  }
  if (extend) {
    st.extend = std::move(extend);
  } else {
    st.extend = [self](const std::vector<int64_t>& msg_ids, int seconds,
                       bool keep_longer) {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      return store.extend_visibility(msg_ids, seconds, keep_longer);
    };
  }
  auto on_extend = [self](atom::extend, std::vector<int64_t>& msg_ids,
                          int seconds, bool keep_longer) -> caf::result<int> {
    return lease_step(self, "extending visibility", [&] {
      return self->state.extend(msg_ids, seconds, keep_longer);
    });
  };
  auto on_claim = [self](atom::claim, std::vector<received_command>& xs)
    -> caf::result<std::vector<int64_t>> {
    return lease_step(self, "claiming deferred deliveries", [&] {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      return store.claim_deferred(xs);
    });
  };
  return start_writer<retry_scheduler_state>(self, std::move(settings),
                                             std::move(parent), on_extend,
                                             on_claim);
}

retry_scheduler_actor
spawn_retry_writer(caf::actor_system& sys, const domain_settings& settings,
                   writer_parent_actor parent, reschedule_fn write,
                   extend_fn extend, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(retry_scheduler, settings,
                                    std::move(parent), std::move(write),
                                    std::move(extend));
  return sys.spawn(retry_scheduler, settings, std::move(parent),
                   std::move(write), std::move(extend));
}

} // namespace cmdbus::actors
