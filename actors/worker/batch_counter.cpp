// The process-wide batch counter: delivers batch-completion callbacks from
// the records the completion writers commit with each completed batch.

#include "cmdbus/actors/worker/batch_counter.hpp"

#include <caf/all.hpp>

#include "cmdbus/db/worker_store.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

/// Most recorded completions claimed per statement.
constexpr int delivery_chunk = 100;

using counter_ptr = batch_counter_actor::stateful_pointer<batch_counter_state>;
using clock = std::chrono::steady_clock;

batch_counter_actor::behavior_type counter_behavior(counter_ptr self);

// Runs the callbacks of one batch; a throwing callback is logged and
// swallowed and does not stop the others.
void run_callbacks(counter_ptr self, const std::string& domain,
                   const uuid& id) {
  for (auto& cb : self->state.callbacks) {
    try {
      cb(domain, id);
    } catch (const std::exception& e) {
      log::from(self->state.name)
        .warn("{}: a batch callback for {} failed: {}", self->state.name,
              id.to_string(), log::one_line(e.what()));
    } catch (...) {
      log::from(self->state.name)
        .warn("{}: a batch callback for {} failed with a non-standard "
              "exception",
              self->state.name, id.to_string());
    }
  }
}

// Brings the next sweep forward to `when` (a retry after a failure).
void sweep_by(counter_ptr self, clock::time_point when) {
  auto& st = self->state;
  st.next_sweep = std::min(st.next_sweep, when);
}

// The session of `domain`'s database, opened on first use (sessions
// connect lazily). Domains on one database share it: its failures are
// counted in the metrics of the domain whose delivery failed.
db_session& session_of(counter_ptr self, const std::string& domain) {
  auto& st = self->state;
  const auto& dsn = config::dsn_for(*st.settings.cfg, domain);
  auto& session = st.sessions[dsn];
  if (!session) {
    session_options opts;
    opts.dsn = dsn;
    opts.statement_timeout = st.settings.cfg->statement_timeout;
    opts.application_name = "cmdbus-batches";
    opts.pooler = st.settings.cfg->pooler;
    session = std::make_unique<db_session>("batch-counter", std::move(opts),
                                           nullptr);
  }
  return *session;
}

// Delivers recorded completions of `domain`: `ids` only (just completed),
// or every one whose lease is free (a sweep). Claims first, runs the
// callbacks, then marks them delivered. While the database fails, the
// undelivered rest stays recorded and a sweep follows the backoff; batches
// whose callbacks ran are kept in `unmarked` and marked on the next try.
void deliver(counter_ptr self, const std::string& domain,
             const std::vector<uuid>* ids) {
  auto& st = self->state;
  auto& session = session_of(self, domain);
  if (session.outage().backing_off()) {
    sweep_by(self, session.outage().retry_at());
    return;
  }
  auto& unmarked = st.unmarked[domain];
  try {
    db::worker_store store{session.get(), domain};
    if (!unmarked.empty()) {
      store.mark_batches_delivered(unmarked);
      unmarked.clear();
    }
    auto lease = static_cast<int>(st.settings.lease.count());
    for (;;) {
      auto claimed = store.claim_batch_deliveries(ids, lease, delivery_chunk,
                                                  st.claimer);
      for (auto& id : claimed) {
        run_callbacks(self, domain, id);
        unmarked.push_back(id);
      }
      store.mark_batches_delivered(unmarked);
      unmarked.clear();
      if (ids || claimed.size() < static_cast<size_t>(delivery_chunk))
        break;
    }
    session.succeeded();
  } catch (const std::exception& e) {
    if (auto m = st.settings.metrics.find(domain); m != st.settings.metrics.end())
      m->second->other_db_errors += 1;
    auto delay = session.failed(e);
    sweep_by(self, clock::now() + delay);
  }
}

void sweep(counter_ptr self) {
  auto& st = self->state;
  st.next_sweep = clock::now() + st.settings.sweep_interval;
  for (auto& d : st.settings.cfg->domains)
    deliver(self, d, nullptr);
}

// Sweeps when due; called on every message, since a busy mailbox keeps
// the behavior's idle timeout from firing. Re-arms that timeout when the
// next sweep moved.
void after_message(counter_ptr self) {
  auto& st = self->state;
  if (clock::now() >= st.next_sweep)
    sweep(self);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
    st.next_sweep - clock::now());
  auto wanted = std::max(std::chrono::milliseconds{1}, left);
  if (wanted < st.armed || wanted > st.armed + std::chrono::seconds{1})
    self->become(counter_behavior(self));
}

batch_counter_actor::behavior_type counter_behavior(counter_ptr self) {
  auto& st = self->state;
  st.armed = std::max(std::chrono::milliseconds{1},
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                        st.next_sweep - clock::now()));
  return {
    [self](atom::batches, const std::string& domain,
           const std::vector<uuid>& ids) {
      deliver(self, domain, &ids);
      after_message(self);
    },
    [self](atom::sweep) { after_message(self); },
    [self](atom::drain) {
      // Everything reported before this message was handled.
      return atom::done::value;
    },
    caf::after(st.armed) >> [self] { after_message(self); },
  };
}

} // namespace

batch_counter_actor::behavior_type
batch_counter(batch_counter_actor::stateful_pointer<batch_counter_state> self,
              std::vector<batch_callback> callbacks,
              batch_delivery_settings settings) {
  auto& st = self->state;
  st.callbacks = std::move(callbacks);
  st.settings = std::move(settings);
  self->set_exit_handler([self](caf::exit_msg& em) {
    for (auto& [dsn, session] : self->state.sessions)
      session->close();
    self->quit(em.reason);
  });
  if (st.callbacks.empty())
    // Nothing is recorded for a worker without callbacks (see
    // domain_settings::record_batches); there is nothing to deliver.
    return {
      [](atom::batches, const std::string&, const std::vector<uuid>&) {},
      [](atom::drain) { return atom::done::value; },
      [](atom::sweep) {},
    };
  // The first sweep at once: completions recorded by a worker that died
  // before delivering them.
  st.next_sweep = clock::now();
  self->send(self, atom::sweep::value);
  return counter_behavior(self);
}

batch_counter_actor spawn_batch_counter(root_actor::pointer root,
                                        std::vector<batch_callback> callbacks,
                                        batch_delivery_settings settings) {
  return root->spawn<caf::detached + caf::linked>(
    batch_counter, std::move(callbacks), std::move(settings));
}

} // namespace cmdbus::actors
