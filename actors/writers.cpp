// The side-effect actors: completion (final outcomes), retry scheduler
// (transient failures and leases), handlers, and the batch counter.

#include "actors/runtime.hpp"

#include <caf/all.hpp>

#include "actors/fault.hpp"
#include <spdlog/spdlog.h>

#include "db/pool.hpp"

namespace cmdbus::actors {

namespace {

/// Most side effects written in one transaction.
constexpr size_t max_flush = 512;

/// Shared state of the two writers: a connection opened on demand and a
/// buffer written as one transaction whenever the mailbox runs empty or the
/// buffer is full (group commit: the busier, the larger the batches), and an
/// error backoff that keeps the buffer (nothing is dropped) until a write
/// succeeds.
///
/// No delayed_send: a message pending in CAF's clock for a detached actor
/// keeps the actor alive at shutdown, so timed retries use the behavior's
/// idle timeout (caf::after), which dies with the actor.
template <class Item>
struct writer_state {
  domain_settings settings;
  caf::actor parent;
  std::unique_ptr<db::connection> conn;
  std::vector<Item> buffer;
  /// When the oldest buffered item arrived.
  std::chrono::steady_clock::time_point oldest;
  int failures = 0;
  /// Set while waiting for the error backoff to pass.
  std::optional<std::chrono::milliseconds> retry_in;

  db::connection& connection() {
    return ensure_connection(conn, settings, "cmdbus-worker");
  }

  // Returns the delay before the next attempt after a failure.
  std::chrono::milliseconds on_failure(const std::exception& e,
                                       const char* who) {
    ++failures;
    settings.counters->db_errors += 1;
    if (conn && !conn->is_open())
      conn.reset();
    auto delay = db::backoff_delay(failures, std::chrono::milliseconds{100},
                                   2.0, std::chrono::milliseconds{10000});
    spdlog::warn("{} for {} failed to write {} side effect(s) ({}); retrying "
                 "in {} ms",
                 who, settings.domain, buffer.size(), e.what(), delay.count());
    return delay;
  }
};

struct completion_state : writer_state<db::finished_command> {
  using item_atom = atom::finish;
  static void flush(caf::stateful_actor<completion_state>* self);
  static inline const char* name = "completion";
};

struct retry_state : writer_state<db::retry_command> {
  using item_atom = atom::retry;
  static void flush(caf::stateful_actor<retry_state>* self);
  static inline const char* name = "retry-scheduler";
};

void completion_state::flush(caf::stateful_actor<completion_state>* self) {
  auto& st = self->state;
  if (st.buffer.empty())
    return;
  try {
    db::worker_store store{st.connection(), st.settings.domain};
    auto batches = store.finish(st.buffer);
    maybe_crash(fault_point::after_commit);
    st.failures = 0;
    auto n = static_cast<int64_t>(st.buffer.size());
    for (auto& x : st.buffer) {
      switch (x.out.kind) {
        case outcome_kind::success: st.settings.counters->completed += 1; break;
        case outcome_kind::business_rule: st.settings.counters->failed += 1; break;
        default: st.settings.counters->moved_to_tsq += 1; break;
      }
    }
    st.buffer.clear();
    self->send(st.parent, atom::done::value, n);
    if (!batches.empty() && st.settings.batch_counter)
      self->send(st.settings.batch_counter, atom::batches::value,
                 st.settings.domain, std::move(batches));
    st.retry_in.reset();
  } catch (const std::exception& e) {
    st.retry_in = st.on_failure(e, self->name());
  }
}

void retry_state::flush(caf::stateful_actor<retry_state>* self) {
  auto& st = self->state;
  if (st.buffer.empty())
    return;
  try {
    db::worker_store store{st.connection(), st.settings.domain};
    store.reschedule(st.buffer);
    maybe_crash(fault_point::after_commit);
    st.failures = 0;
    auto n = static_cast<int64_t>(st.buffer.size());
    st.settings.counters->retried += n;
    st.buffer.clear();
    self->send(st.parent, atom::done::value, n);
    st.retry_in.reset();
  } catch (const std::exception& e) {
    st.retry_in = st.on_failure(e, self->name());
  }
}

// Writes when the mailbox ran empty or the buffer is full, unless backing
// off after a failure (then the behavior's timeout retries).
/// The behavior of both writers: buffer each item; write when the mailbox
/// ran empty or the buffer is full, unless backing off after a failure, in
/// which case the behavior's timeout retries. `extra` are further handlers.
template <class State, class... Extra>
caf::behavior writer_behavior(caf::stateful_actor<State>* self,
                              Extra... extra) {
  auto update = [self, extra...] {
    auto& st = self->state;
    if (st.retry_in || st.buffer.empty())
      return;
    // Group commit: write when full, or when nothing else is queued and the
    // oldest item waited flush_interval (so that the batch can grow while
    // handlers are still finishing; the behavior's timeout covers a lull).
    auto waited = std::chrono::steady_clock::now() - st.oldest;
    if (st.buffer.size() >= max_flush
        || (self->mailbox().empty() && waited >= st.settings.flush_interval))
      State::flush(self);
    if (st.retry_in)
      self->become(writer_behavior(self, extra...));
  };
  auto on_item = [self, update](typename State::item_atom,
                                typename decltype(State::buffer)::value_type&
                                  x) {
    auto& st = self->state;
    if (st.buffer.empty())
      st.oldest = std::chrono::steady_clock::now();
    st.buffer.push_back(std::move(x));
    update();
  };
  auto on_flush = [self, extra...](atom::flush) {
    if (self->state.retry_in)
      return;
    State::flush(self);
    if (self->state.retry_in)
      self->become(writer_behavior(self, extra...));
  };
  if (!self->state.retry_in)
    return {on_item, on_flush, extra...,
            caf::after(std::max(std::chrono::milliseconds{1},
                                self->state.settings.flush_interval))
              >> [self, extra...] {
                  State::flush(self);
                  if (self->state.retry_in)
                    self->become(writer_behavior(self, extra...));
                }};
  return {on_item, on_flush, extra...,
          caf::after(*self->state.retry_in) >> [self, extra...] {
            self->state.retry_in.reset();
            State::flush(self);
            self->become(writer_behavior(self, extra...));
          }};
}

/// Starts a writer: on exit it writes what is buffered first (a failure
/// leaves the messages to reappear after their visibility timeout: nothing
/// is lost).
template <class State, class... Extra>
caf::behavior start_writer(caf::stateful_actor<State>* self,
                           domain_settings settings, caf::actor parent,
                           Extra... extra) {
  self->state.settings = std::move(settings);
  self->state.parent = std::move(parent);
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.retry_in.reset();
    State::flush(self);
    self->quit(em.reason);
  });
  return writer_behavior(self, extra...);
}

caf::behavior completion(caf::stateful_actor<completion_state>* self,
                         domain_settings settings, caf::actor parent) {
  return start_writer(self, std::move(settings), std::move(parent));
}

caf::behavior retry_scheduler(caf::stateful_actor<retry_state>* self,
                              domain_settings settings, caf::actor parent) {
  auto on_extend = [self](atom::extend, std::vector<int64_t>& msg_ids,
                          int seconds, bool keep_longer) -> caf::result<int> {
    auto& st = self->state;
    try {
      db::worker_store store{st.connection(), st.settings.domain};
      return store.extend_visibility(msg_ids, seconds, keep_longer);
    } catch (const std::exception& e) {
      st.settings.counters->db_errors += 1;
      if (st.conn && !st.conn->is_open())
        st.conn.reset();
      return caf::make_error(caf::sec::runtime_error,
                             std::string{"extending visibility failed: "}
                               + e.what());
    }
  };
  return start_writer(self, std::move(settings), std::move(parent),
                      on_extend);
}

/// Runs the application's handlers, one command at a time, on its own
/// thread (spawned detached), so blocking handlers never stall CAF's
/// scheduler.
caf::behavior handler(caf::event_based_actor* self, domain_settings settings,
                      caf::actor retry) {
  return {
    [self, settings, retry](atom::handle, const received_command& rc) {
      auto* sys = &self->system();
      handler_context::extender extend = [sys, retry,
                                          &rc](std::chrono::seconds secs) {
        caf::scoped_actor tmp{*sys};
        std::optional<std::string> failure;
        tmp
          ->request(retry, std::chrono::seconds{30}, atom::extend::value,
                    std::vector<int64_t>{rc.msg_id},
                    static_cast<int>(secs.count()), false)
          .receive([](int) {},
                   [&](caf::error& err) { failure = to_string(err); });
        if (failure)
          throw command_bus_error("extend_visibility failed: " + *failure);
      };
      handler_context ctx{rc, std::move(extend), *settings.cancelled};
      return settings.registry->run(rc, ctx);
    },
  };
}

} // namespace

caf::actor spawn_completion(caf::event_based_actor* parent,
                            const domain_settings& settings) {
  return parent->spawn<caf::detached + caf::linked>(
    completion, settings, caf::actor_cast<caf::actor>(parent));
}

caf::actor spawn_retry(caf::event_based_actor* parent,
                       const domain_settings& settings) {
  return parent->spawn<caf::detached + caf::linked>(
    retry_scheduler, settings, caf::actor_cast<caf::actor>(parent));
}

caf::actor spawn_handler(caf::event_based_actor* parent,
                         const domain_settings& settings, caf::actor retry) {
  return parent->spawn<caf::detached>(handler, settings, std::move(retry));
}

spawners default_spawners() {
  return {spawn_poller, spawn_completion, spawn_handler, spawn_retry};
}

caf::behavior batch_counter(caf::stateful_actor<batch_counter_state>* self,
                            std::vector<batch_callback> callbacks) {
  self->state.callbacks = std::move(callbacks);
  return {
    [self](atom::batches, const std::string& domain,
           const std::vector<uuid>& ids) {
      for (auto& id : ids)
        for (auto& cb : self->state.callbacks) {
          try {
            cb(domain, id);
          } catch (const std::exception& e) {
            // Like the reference: callback failures are logged, swallowed.
            spdlog::warn("batch callback for {} failed: {}", id.to_string(),
                         e.what());
          }
        }
    },
  };
}

} // namespace cmdbus::actors
