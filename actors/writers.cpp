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
  /// When the last write ended (successful or not), and how many items it
  /// had.
  std::chrono::steady_clock::time_point last_write;
  size_t last_size = 0;
  int failures = 0;
  /// Set while waiting for the error backoff to pass.
  std::optional<std::chrono::milliseconds> retry_in;
  /// The timeout of the current behavior: none while the buffer is empty
  /// (an idle writer sleeps), flush_interval while items wait, retry_in
  /// while backing off.
  std::optional<std::chrono::milliseconds> armed;

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
  finish_fn write;
  static void flush(caf::stateful_actor<completion_state>* self);
  static inline const char* name = "completion";
};

struct retry_state : writer_state<db::retry_command> {
  using item_atom = atom::retry;
  reschedule_fn write;
  extend_fn extend;
  static void flush(caf::stateful_actor<retry_state>* self);
  static inline const char* name = "retry-scheduler";
};

void completion_state::flush(caf::stateful_actor<completion_state>* self) {
  auto& st = self->state;
  if (st.buffer.empty())
    return;
  try {
    auto batches = st.write(st.buffer);
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
    st.write(st.buffer);
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

// Writes the buffer now (if any) and remembers when and how much, for the
// light-load rule of writer_behavior.
template <class State>
void write_now(caf::stateful_actor<State>* self) {
  auto& st = self->state;
  if (st.buffer.empty())
    return;
  auto n = st.buffer.size();
  State::flush(self);
  st.last_write = std::chrono::steady_clock::now();
  st.last_size = n;
}

// Returns the timeout the writer's behavior needs now (see armed).
template <class State>
std::optional<std::chrono::milliseconds>
wanted_timeout(const State& st) {
  if (st.retry_in)
    return st.retry_in;
  if (st.buffer.empty())
    return std::nullopt;
  return std::max(std::chrono::milliseconds{1}, st.settings.flush_interval);
}

template <class State, class... Extra>
caf::behavior writer_behavior(caf::stateful_actor<State>* self,
                              Extra... extra);

// Switches the behavior when its timeout must change (buffer filled or
// emptied, backoff started, grew or ended).
template <class State, class... Extra>
void refresh(caf::stateful_actor<State>* self, Extra... extra) {
  if (wanted_timeout(self->state) != self->state.armed)
    self->become(writer_behavior(self, extra...));
}

/// The behavior of both writers: buffer each item; write when the buffer is
/// full or the mailbox ran empty (see update), on (atom::flush), and when
/// the timeout passes; after a failure, wait for the backoff (the buffer is
/// kept and keeps growing). `extra` are further handlers.
template <class State, class... Extra>
caf::behavior writer_behavior(caf::stateful_actor<State>* self,
                              Extra... extra) {
  auto update = [self, extra...] {
    auto& st = self->state;
    if (!st.retry_in && !st.buffer.empty()) {
      // Group commit: write when full, or when nothing else is queued and
      // either the oldest item waited flush_interval (so that the batch can
      // grow while handlers are still finishing; the timeout covers a lull)
      // or the load is light: the last write had a single item, or the
      // oldest came a flush_interval after it (waiting would only add
      // latency). Under load, items queue while a write runs and the
      // batches grow by themselves.
      auto interval = st.settings.flush_interval;
      auto waited = std::chrono::steady_clock::now() - st.oldest;
      auto quiet = st.last_size <= 1 || st.oldest - st.last_write >= interval;
      if (st.buffer.size() >= max_flush
          || (self->mailbox().empty() && (quiet || waited >= interval)))
        write_now(self);
    }
    refresh(self, extra...);
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
    if (!self->state.retry_in)
      write_now(self);
    refresh(self, extra...);
  };
  auto& st = self->state;
  st.armed = wanted_timeout(st);
  if (!st.armed)
    return {on_item, on_flush, extra...};
  return {on_item, on_flush, extra...,
          caf::after(*st.armed) >> [self, extra...] {
            self->state.retry_in.reset();
            write_now(self);
            refresh(self, extra...);
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
                         domain_settings settings, caf::actor parent,
                         finish_fn write) {
  if (write) {
    self->state.write = std::move(write);
  } else {
    self->state.write = [self](const std::vector<db::finished_command>& xs) {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      store.record_batch_completions(st.settings.record_batches);
      return store.finish(xs);
    };
  }
  return start_writer(self, std::move(settings), std::move(parent));
}

caf::behavior retry_scheduler(caf::stateful_actor<retry_state>* self,
                              domain_settings settings, caf::actor parent,
                              reschedule_fn write, extend_fn extend) {
  auto& st = self->state;
  if (write) {
    st.write = std::move(write);
  } else {
    st.write = [self](const std::vector<db::retry_command>& xs) {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      store.reschedule(xs);
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
    auto& st = self->state;
    try {
      return st.extend(msg_ids, seconds, keep_longer);
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

caf::actor spawn_completion_writer(caf::actor_system& sys,
                                   const domain_settings& settings,
                                   caf::actor parent, finish_fn write,
                                   bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(completion, settings, std::move(parent),
                                    std::move(write));
  return sys.spawn(completion, settings, std::move(parent), std::move(write));
}

caf::actor spawn_retry_writer(caf::actor_system& sys,
                              const domain_settings& settings,
                              caf::actor parent, reschedule_fn write,
                              extend_fn extend, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(retry_scheduler, settings,
                                    std::move(parent), std::move(write),
                                    std::move(extend));
  return sys.spawn(retry_scheduler, settings, std::move(parent),
                   std::move(write), std::move(extend));
}

caf::actor spawn_completion(caf::event_based_actor* parent,
                            const domain_settings& settings) {
  auto writer = spawn_completion_writer(
    parent->system(), settings, caf::actor_cast<caf::actor>(parent), {}, true);
  parent->link_to(writer);
  return writer;
}

caf::actor spawn_retry(caf::event_based_actor* parent,
                       const domain_settings& settings) {
  auto writer = spawn_retry_writer(parent->system(), settings,
                                   caf::actor_cast<caf::actor>(parent), {},
                                   {}, true);
  parent->link_to(writer);
  return writer;
}

caf::actor spawn_handler(caf::event_based_actor* parent,
                         const domain_settings& settings, caf::actor retry,
                         handler_mode mode) {
  if (mode == handler_mode::non_blocking)
    return parent->spawn(handler, settings, std::move(retry));
  return parent->spawn<caf::detached>(handler, settings, std::move(retry));
}

spawners default_spawners() {
  return {spawn_poller, spawn_completion, spawn_handler, spawn_retry};
}

namespace {

/// Most recorded completions claimed per statement.
constexpr int delivery_chunk = 100;

using counter_ptr = caf::stateful_actor<batch_counter_state>*;

// Runs the callbacks of one batch; a throwing callback is logged and
// swallowed (like the reference) and does not stop the others.
void run_callbacks(counter_ptr self, const std::string& domain,
                   const uuid& id) {
  for (auto& cb : self->state.callbacks) {
    try {
      cb(domain, id);
    } catch (const std::exception& e) {
      spdlog::warn("batch callback for {} failed: {}", id.to_string(),
                   e.what());
    }
  }
}

// Delivers recorded completions of `domain`: `ids` only (just completed),
// or every one whose lease is free (a sweep). Claims first, runs the
// callbacks, then marks them delivered. On a database failure the
// undelivered rest stays recorded for a later sweep.
void deliver(counter_ptr self, const std::string& domain,
             const std::vector<uuid>* ids) {
  auto& st = self->state;
  try {
    db::worker_store store{
      ensure_connection(st.conn, st.settings.dsn,
                        st.settings.statement_timeout, "cmdbus-batches"),
      domain};
    auto lease = static_cast<int>(st.settings.lease.count());
    for (;;) {
      auto claimed = store.claim_batch_deliveries(ids, lease, delivery_chunk);
      for (auto& id : claimed)
        run_callbacks(self, domain, id);
      store.mark_batches_delivered(claimed);
      if (ids || claimed.size() < static_cast<size_t>(delivery_chunk))
        break;
    }
  } catch (const std::exception& e) {
    if (st.counters)
      st.counters->db_errors += 1;
    if (st.conn && !st.conn->is_open())
      st.conn.reset();
    spdlog::warn("{}: delivering batch completions of {} failed ({}); they "
                 "stay recorded and are delivered by a later sweep",
                 self->name(), domain, e.what());
  }
}

void sweep(counter_ptr self) {
  auto& st = self->state;
  st.next_sweep = std::chrono::steady_clock::now() + st.settings.sweep_interval;
  for (auto& d : st.settings.domains)
    deliver(self, d, nullptr);
}

// Sweeps when due; called on every message, since a busy mailbox keeps
// the behavior's idle timeout from firing.
void sweep_if_due(counter_ptr self) {
  if (std::chrono::steady_clock::now() >= self->state.next_sweep)
    sweep(self);
}

} // namespace

caf::behavior batch_counter(caf::stateful_actor<batch_counter_state>* self,
                            std::vector<batch_callback> callbacks,
                            batch_delivery_settings settings,
                            std::shared_ptr<worker_counters> counters) {
  auto& st = self->state;
  st.callbacks = std::move(callbacks);
  st.settings = std::move(settings);
  st.counters = std::move(counters);
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.conn.reset();
    self->quit(em.reason);
  });
  if (st.callbacks.empty())
    // Nothing is recorded for a worker without callbacks (see
    // domain_settings::record_batches); there is nothing to deliver.
    return {[](atom::batches, const std::string&, const std::vector<uuid>&) {
    }};
  self->send(self, atom::sweep::value);
  return {
    [self](atom::batches, const std::string& domain,
           const std::vector<uuid>& ids) {
      deliver(self, domain, &ids);
      sweep_if_due(self);
    },
    [self](atom::sweep) { sweep(self); },
    caf::after(st.settings.sweep_interval) >> [self] { sweep_if_due(self); },
  };
}

} // namespace cmdbus::actors
