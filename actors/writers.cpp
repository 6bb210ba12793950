// The side-effect actors of a domain: completion (final outcomes) and retry
// scheduler (transient failures and leases), and the handler actors.

#include "actors/runtime.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/fault.hpp"

namespace cmdbus::actors {

namespace {

/// Most side effects written in one transaction.
constexpr size_t max_flush = 512;

/// Shared state of the two writers: a database session and a buffer
/// written as one transaction whenever the mailbox runs empty or the buffer
/// is full (group commit: the busier, the larger the batches), and an error
/// backoff that keeps the buffer (nothing is dropped) until a write
/// succeeds.
///
/// No delayed_send: a message pending in CAF's clock for a detached actor
/// keeps the actor alive at shutdown, so timed writes use the behavior's
/// idle timeout (caf::after), which dies with the actor. That timeout
/// restarts with every message, so a busy writer also checks the backoff's
/// end on each message (see writer_behavior).
template <class Item>
struct writer_state {
  domain_settings settings;
  caf::actor parent;
  std::unique_ptr<db_session> session;
  std::vector<Item> buffer;
  /// When the oldest buffered item arrived.
  std::chrono::steady_clock::time_point oldest;
  /// When the last write ended (successful or not), and how many items it
  /// had.
  std::chrono::steady_clock::time_point last_write;
  size_t last_size = 0;
  /// Set while waiting for the error backoff to pass.
  std::optional<std::chrono::milliseconds> retry_in;
  /// The timeout of the current behavior: none while the buffer is empty
  /// (an idle writer sleeps), flush_interval while items wait, retry_in
  /// while backing off.
  std::optional<std::chrono::milliseconds> armed;

  db::connection& connection() {
    return session->get();
  }

  // Records a failed write: reports an unavailable database to the
  // supervisor (its watchdog tells an outage from a stuck writer) and
  // starts the backoff.
  void on_failure(caf::event_based_actor* self, const std::exception& e) {
    if (is_unavailable(e))
      self->send(parent, atom::unavailable::value);
    retry_in = session->failed(e);
  }

  // Whether the backoff after a failed write has passed.
  bool retry_due() const {
    return retry_in && !session->outage().backing_off();
  }
};

struct completion_state : writer_state<db::finished_command> {
  using item_atom = atom::finish;
  finish_fn write;
  static void commit(caf::stateful_actor<completion_state>* self, size_t n);
  static void refused(caf::stateful_actor<completion_state>* self,
                      const std::exception& e);
  static inline const char* name = "completion";
};

struct retry_state : writer_state<db::retry_command> {
  using item_atom = atom::retry;
  reschedule_fn write;
  extend_fn extend;
  static void commit(caf::stateful_actor<retry_state>* self, size_t n);
  static void refused(caf::stateful_actor<retry_state>* self,
                      const std::exception& e);
  static inline const char* name = "retry-scheduler";
};

// Counts and logs the stale deliveries of one write.
void count_stale(const domain_settings& settings, const char* who,
                 size_t stale) {
  if (stale == 0)
    return;
  settings.counters->stale += static_cast<int64_t>(stale);
  spdlog::info("{} for {}: {} outcome(s) not written: another delivery owns "
               "their message now",
               who, settings.domain, stale);
}

// Returns whether the database refused a write because of what one of its
// items holds (bad data, a broken constraint; or the item could not even be
// encoded), as opposed to a failure that says nothing about the items (an
// outage, a conflict, a broken schema), which is retried as it is.
bool refused_for_content(const std::exception& e) {
  auto* err = dynamic_cast<const db::error*>(&e);
  if (err == nullptr)
    return dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
  auto cls = err->sqlstate().substr(0, 2);
  return cls == "22" || cls == "23";
}

// Writes the first `n` buffered items with `st.write` and moves them to
// `items`; on failure the buffer stays as it was. The whole buffer is
// swapped out (and back on failure); a part of it (one item, when writing
// one by one) is copied.
template <class State, class Item>
auto write_prefix(State& st, size_t n, std::vector<Item>& items) {
  auto whole = n == st.buffer.size();
  if (whole)
    items.swap(st.buffer);
  else
    items.assign(st.buffer.begin(), st.buffer.begin() + n);
  try {
    auto res = st.write(items);
    if (!whole)
      st.buffer.erase(st.buffer.begin(), st.buffer.begin() + n);
    return res;
  } catch (...) {
    if (whole)
      st.buffer.swap(items);
    throw;
  }
}

// Writes the first `n` buffered outcomes as one transaction, counts them,
// drops them from the buffer and reports them (batches, then done).
void completion_state::commit(caf::stateful_actor<completion_state>* self,
                              size_t n) {
  auto& st = self->state;
  std::vector<db::finished_command> items;
  auto res = write_prefix(st, n, items);
  maybe_crash(fault_point::after_commit);
  std::sort(res.stale.begin(), res.stale.end());
  for (auto& x : items) {
    if (std::binary_search(res.stale.begin(), res.stale.end(), x.rc.msg_id))
      continue;
    switch (x.out.kind) {
      case outcome_kind::success: st.settings.counters->completed += 1; break;
      case outcome_kind::business_rule: st.settings.counters->failed += 1; break;
      default: st.settings.counters->moved_to_tsq += 1; break;
    }
  }
  count_stale(st.settings, "completion", res.stale.size());
  if (!res.completed_batches.empty())
    self->send(st.parent, atom::batches::value, st.settings.domain,
               std::move(res.completed_batches));
  self->send(st.parent, atom::done::value, static_cast<int64_t>(n));
}

// The database refused the first buffered outcome alone: it goes to the
// troubleshooting queue instead, with the refusal as its error and no reply,
// so that an operator sees it (and can retry it) rather than the command
// running again and again into the same refusal.
void completion_state::refused(caf::stateful_actor<completion_state>* self,
                               const std::exception& e) {
  auto& x = self->state.buffer.front();
  spdlog::error("completion for {}: the database refused the outcome of "
                "command {} (msg_id {}): {}; moving it to the troubleshooting "
                "queue",
                self->state.settings.domain, x.rc.cmd.command_id.to_string(),
                x.rc.msg_id, e.what());
  outcome out;
  out.kind = outcome_kind::permanent;
  out.error_code = "OUTCOME_NOT_WRITTEN";
  out.error_message = to_valid_text(std::string{"the database refused the "
                                                "command's outcome: "}
                                    + e.what());
  x.out = std::move(out);
  x.exhausted = false;
  x.rc.cmd.reply_to.reset();
  commit(self, 1);
}

void retry_state::commit(caf::stateful_actor<retry_state>* self, size_t n) {
  auto& st = self->state;
  std::vector<db::retry_command> items;
  auto stale = write_prefix(st, n, items);
  maybe_crash(fault_point::after_commit);
  st.settings.counters->retried
    += static_cast<int64_t>(n) - static_cast<int64_t>(stale.size());
  count_stale(st.settings, "retry-scheduler", stale.size());
  self->send(st.parent, atom::done::value, static_cast<int64_t>(n));
}

// The database refused a retry alone: it is dropped. Nothing is lost: the
// message becomes visible again when its visibility timeout ends, and the
// command runs again (its next attempt).
void retry_state::refused(caf::stateful_actor<retry_state>* self,
                          const std::exception& e) {
  auto& st = self->state;
  auto& x = st.buffer.front();
  spdlog::error("retry-scheduler for {}: the database refused the retry of "
                "command {} (msg_id {}): {}; it runs again when its "
                "visibility timeout ends",
                st.settings.domain, x.rc.cmd.command_id.to_string(),
                x.rc.msg_id, e.what());
  st.buffer.erase(st.buffer.begin());
  self->send(st.parent, atom::done::value, int64_t{1});
}

// Writes the buffer as one transaction. When the database refuses it for
// what an item holds, the items of that write are written one by one, so
// that one bad item cannot hold back the others for ever; the refused one
// is handled by State::refused. Any other failure keeps the buffer and
// starts the backoff.
template <class State>
void flush(caf::stateful_actor<State>* self) {
  auto& st = self->state;
  size_t one_by_one = 0;
  while (!st.buffer.empty()) {
    auto n = one_by_one > 0 ? size_t{1} : st.buffer.size();
    try {
      try {
        State::commit(self, n);
      } catch (const std::exception& e) {
        if (!refused_for_content(e))
          throw;
        if (n > 1) {
          spdlog::warn("{} for {}: the database refused a write of {} items "
                       "({}); writing them one by one",
                       State::name, st.settings.domain, n, e.what());
          one_by_one = n;
          continue;
        }
        State::refused(self, e);
      }
      st.session->succeeded();
      st.retry_in.reset();
    } catch (const std::exception& e) {
      st.on_failure(self, e);
      return;
    }
    if (one_by_one == 0 || --one_by_one == 0)
      return;
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
  flush(self);
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
    if (st.retry_due()) {
      // The backoff passed while items kept arriving (the idle timeout
      // never fired): try again now.
      st.retry_in.reset();
      write_now(self);
    } else if (!st.retry_in && !st.buffer.empty()) {
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

/// Starts a writer: on exit it writes what is buffered first, unless the
/// database is failing (a failure, or nothing written, leaves the messages
/// to reappear after their visibility timeout: nothing is lost).
template <class State, class... Extra>
caf::behavior start_writer(caf::stateful_actor<State>* self,
                           domain_settings settings, caf::actor parent,
                           Extra... extra) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.parent = std::move(parent);
  st.session = std::make_unique<db_session>(
    std::string{State::name} + " for " + st.settings.domain,
    session_for(st.settings, "cmdbus-worker"), st.settings.counters,
    [self] { return self->clock().now(); });
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    if (!st.buffer.empty() && st.session->outage().failing())
      spdlog::warn("{} for {} stops with {} side effect(s) not written; "
                   "their messages reappear after the visibility timeout",
                   State::name, st.settings.domain, st.buffer.size());
    else
      flush(self);
    st.session->close();
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
    auto& st = self->state;
    // While the database is failing, answer at once instead of waiting for
    // a connection attempt per request.
    if (st.session->outage().backing_off())
      return caf::make_error(caf::sec::runtime_error,
                             "extending visibility failed: the database is "
                             "unavailable");
    try {
      auto n = st.extend(msg_ids, seconds, keep_longer);
      st.session->succeeded();
      return n;
    } catch (const std::exception& e) {
      st.on_failure(self, e);
      return caf::make_error(caf::sec::runtime_error,
                             std::string{"extending visibility failed: "}
                               + e.what());
    }
  };
  return start_writer(self, std::move(settings), std::move(parent),
                      on_extend);
}

// Returns the extender of one delivery's handler_context. A blocking
// handler waits for the answer (on its own thread); a non-blocking one runs
// on a scheduler thread, which must never wait, so its extension is only
// queued. Either way the request goes to the supervisor, which forwards it
// to its current retry scheduler. After the delivery ended (`live` false)
// the extender throws: the message may already belong to someone else.
handler_context::extender
make_extender(caf::actor_system* sys, caf::actor supervisor, int64_t msg_id,
              handler_mode mode, std::chrono::milliseconds timeout,
              std::shared_ptr<const std::atomic<bool>> live) {
  return [sys, supervisor, msg_id, mode, timeout,
          live](std::chrono::seconds secs) {
    if (!live->load())
      throw command_bus_error("extend_visibility after the handler returned: "
                              "the delivery has ended");
    auto ids = std::vector<int64_t>{msg_id};
    auto seconds = static_cast<int>(secs.count());
    if (mode == handler_mode::non_blocking) {
      caf::anon_send(supervisor, atom::extend::value, std::move(ids), seconds,
                     false);
      return;
    }
    std::optional<std::string> failure;
    {
      caf::scoped_actor tmp{*sys};
      tmp
        ->request(supervisor, timeout, atom::extend::value, std::move(ids),
                  seconds, false)
        .receive([](int) {},
                 [&](caf::error& err) { failure = to_string(err); });
    }
    // A thread of the application keeps no reference to the system's
    // logger (see shutdown.hpp).
    caf::logger::set_current_actor_system(nullptr);
    if (failure)
      throw command_bus_error("extend_visibility failed: " + *failure);
  };
}

/// Runs the application's handlers, one command at a time: detached (a
/// thread of its own) for blocking handlers, so that they never stall CAF's
/// scheduler; scheduled for non-blocking ones.
caf::behavior handler(caf::event_based_actor* self, domain_settings settings,
                      caf::actor supervisor, handler_mode mode) {
  // A blocking extension waits at most for one statement of the retry
  // scheduler, plus its own queueing.
  auto timeout = settings.statement_timeout + std::chrono::seconds{5};
  return {
    [self, settings, supervisor, mode, timeout](atom::handle, command_ptr rc) {
      auto live = std::make_shared<std::atomic<bool>>(true);
      handler_context ctx{rc,
                          make_extender(&self->system(), supervisor,
                                        rc->msg_id, mode, timeout, live),
                          settings.cancelled};
      auto out = settings.registry->run(*rc, ctx);
      live->store(false);
      return out;
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
                         const domain_settings& settings, handler_mode mode) {
  auto sup = caf::actor_cast<caf::actor>(parent);
  if (mode == handler_mode::non_blocking)
    return parent->spawn<caf::linked>(handler, settings, std::move(sup), mode);
  return parent->spawn<caf::detached + caf::linked>(handler, settings,
                                                    std::move(sup), mode);
}

spawners default_spawners() {
  return {spawn_poller, spawn_completion, spawn_handler, spawn_retry};
}

} // namespace cmdbus::actors
