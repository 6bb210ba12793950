#include "actors/runtime.hpp"

#include <caf/all.hpp>

#include "actors/fault.hpp"
#include <spdlog/spdlog.h>

namespace cmdbus::actors {

db::connection& ensure_connection(std::unique_ptr<db::connection>& conn,
                                  const std::string& dsn,
                                  std::chrono::milliseconds statement_timeout,
                                  const char* application_name) {
  if (!conn || !conn->is_open()) {
    db::connection_options opts;
    opts.application_name = application_name;
    opts.statement_timeout = statement_timeout;
    conn = std::make_unique<db::connection>(db::connection::open(dsn, opts));
  }
  return *conn;
}

db::connection& ensure_connection(std::unique_ptr<db::connection>& conn,
                                  const domain_settings& settings,
                                  const char* application_name) {
  return ensure_connection(conn, settings.dsn, settings.statement_timeout,
                           application_name);
}

int backoff_seconds(const config::retry_config& retry, int attempt,
                    std::mt19937_64& rng) {
  retry_policy policy;
  policy.max_attempts = retry.max_attempts;
  policy.backoff_schedule = retry.backoff_seconds;
  // The command's own max_attempts decides exhaustion (D6); the schedule
  // gives the delay, clamped to its last entry.
  if (policy.backoff_schedule.empty())
    policy.backoff_schedule = {30};
  policy.max_attempts = std::max(attempt + 1, 1);
  auto base = policy.backoff(attempt);
  if (retry.jitter <= 0 || base <= 0)
    return base;
  std::uniform_real_distribution<double> d{-retry.jitter, retry.jitter};
  auto value = static_cast<int>(std::lround(base * (1.0 + d(rng))));
  return std::max(0, value);
}

namespace {

using self_ptr = caf::stateful_actor<supervisor_state>*;

void handler_freed(self_ptr self, int64_t n);
void committed(self_ptr self, int64_t n);

supervisor_state::pool& pool_of(supervisor_state& st, handler_mode mode) {
  return st.pools[static_cast<size_t>(mode)];
}

// The pool that runs `rc`: its handler's mode, or any pool for a command
// without a handler (it fails at once).
supervisor_state::pool& pool_for(supervisor_state& st,
                                 const received_command& rc) {
  auto& p = pool_of(
      st, st.settings.registry->mode(rc.cmd.domain, rc.cmd.command_type));
  if (!p.all.empty())
    return p;
  for (auto& other : st.pools)
    if (!other.all.empty())
      return other;
  return p;
}

// Starts the next commands (in order) while their pool has an idle
// handler. Credits bound the commands held to `concurrency` + `prefetch`:
// the prefetched ones wait here for a free handler (as does any command
// while a dead handler is replaced).
void dispatch(self_ptr self) {
  auto& st = self->state;
  while (!st.backlog.empty()) {
    auto& p = pool_for(st, st.backlog.front().rc);
    if (p.idle.empty())
      return;
    auto h = p.idle.front();
    p.idle.pop_front();
    auto rc = std::move(st.backlog.front().rc);
    st.running[rc.msg_id] = {h, st.backlog.front().read_at};
    st.backlog.pop_front();
    auto msg_id = rc.msg_id;
    self->request(h, caf::infinite, atom::handle::value, rc)
      .then(
        [self, h, rc](outcome& out) {
          maybe_crash(fault_point::after_handler);
          auto& st = self->state;
          st.running.erase(rc.msg_id);
          pool_for(st, rc).idle.push_back(h);
          handler_freed(self, 1);
          if (out.kind == outcome_kind::transient
              && rc.attempt < rc.max_attempts) {
            db::retry_command x{rc, std::move(out),
                                backoff_seconds(st.settings.retry, rc.attempt,
                                                st.rng)};
            self->send(st.retry, atom::retry::value, std::move(x));
          } else {
            bool exhausted = out.kind == outcome_kind::transient;
            db::finished_command x{rc, std::move(out), exhausted};
            self->send(st.completion, atom::finish::value, std::move(x));
          }
          dispatch(self);
        },
        [self, msg_id](caf::error& err) {
          // The handler died while running it (its DOWN message respawns
          // it). The message reappears after its visibility timeout.
          spdlog::warn("{} lost command msg_id {}: {}", self->name(), msg_id,
                       to_string(err));
          self->state.running.erase(msg_id);
          handler_freed(self, 1);
          committed(self, 1);
        });
  }
}

// Answers waiting drains once nothing is held and intake stopped (or, in
// tick mode, the poller found the queue empty after its last credit).
void maybe_finish_drain(self_ptr self) {
  auto& st = self->state;
  if (st.held > 0 || !(st.draining || (st.settings.tick && st.poller_idle)))
    return;
  for (auto& rp : st.drain_waiters)
    rp.deliver(atom::done::value);
  st.drain_waiters.clear();
}

// Sends `n` credits (0 just makes the poller read again) unless intake
// stopped. An "idle" from the poller counts only once it saw this credit.
void give_credit(self_ptr self, int64_t n) {
  auto& st = self->state;
  if (st.draining || !st.poller)
    return;
  self->send(st.poller, atom::credit::value, n);
  ++st.credits_sent;
  st.poller_idle = false;
}

// Returns the pending credits to the poller now.
void flush_credit(self_ptr self) {
  auto& st = self->state;
  ++st.credit_epoch;
  if (st.pending_credit <= 0)
    return;
  give_credit(self, st.pending_credit);
  st.pending_credit = 0;
}

// `n` handler slots became free: the poller may read that many more
// messages. Credits go back at once when no handler runs any more (then
// the poller reads for the whole pool), else after at most flush_interval
// (atom::credit_due), so that reads stay large under load (a small read
// costs nearly as much as a large one) while a freed slot never waits
// long for work.
void handler_freed(self_ptr self, int64_t n) {
  auto& st = self->state;
  st.settings.counters->in_flight -= n;
  if (st.settings.domain_in_flight)
    *st.settings.domain_in_flight -= n;
  auto first = st.pending_credit == 0;
  st.pending_credit += n;
  if (st.running.empty() && st.backlog.empty()) {
    flush_credit(self);
  } else if (first) {
    self->delayed_send(self, st.settings.flush_interval,
                       atom::credit_due::value, st.credit_epoch);
  }
}

// The side effects of `n` commands are committed (or will never be
// written): progress for a drain. In tick mode the poller reads once more,
// since a retry may have become due.
void committed(self_ptr self, int64_t n) {
  auto& st = self->state;
  st.held -= n;
  if (st.settings.tick)
    give_credit(self, 0);
  maybe_finish_drain(self);
}

// The lease heartbeat's period: a quarter of the visibility timeout (at
// least 100 ms), so that a message is extended between half and three
// quarters of its visibility timeout, well before it expires.
std::chrono::milliseconds heartbeat_period(std::chrono::seconds vt) {
  return std::max(std::chrono::milliseconds{100},
                  std::chrono::duration_cast<std::chrono::milliseconds>(vt)
                    / 4);
}

void add_handler(self_ptr self, handler_mode mode) {
  auto& st = self->state;
  auto h = st.spawn.handler(self, st.settings, st.retry, mode);
  self->monitor(h);
  pool_of(st, mode).all.push_back(h);
  pool_of(st, mode).idle.push_back(h);
}

} // namespace

caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         domain_settings settings, spawners spawn) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.spawn = std::move(spawn);
  st.completion = st.spawn.completion(self, st.settings);
  st.retry = st.spawn.retry(self, st.settings);
  for (auto mode : {handler_mode::blocking, handler_mode::non_blocking})
    if (st.settings.registry->uses(st.settings.domain, mode))
      for (int i = 0; i < st.settings.concurrency; ++i)
        add_handler(self, mode);
  st.poller = st.spawn.poller(self, st.settings);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto is_src = [&](const caf::actor& a) { return a == dm.source; };
    for (auto mode : {handler_mode::blocking, handler_mode::non_blocking}) {
      auto& p = pool_of(st, mode);
      auto it = std::find_if(p.all.begin(), p.all.end(), is_src);
      if (it == p.all.end())
        continue;
      p.all.erase(it);
      p.idle.erase(std::remove_if(p.idle.begin(), p.idle.end(), is_src),
                   p.idle.end());
      st.settings.counters->handler_restarts += 1;
      spdlog::warn("{} handler died ({}); replacing it", self->name(),
                   to_string(dm.reason));
      if (!st.draining)
        add_handler(self, mode);
      dispatch(self);
      return;
    }
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    for (auto& p : st.pools)
      for (auto& h : p.all)
        self->send_exit(h, em.reason);
    for (auto* a : {&st.poller, &st.completion, &st.retry})
      if (*a)
        self->send_exit(*a, em.reason);
    self->quit(em.reason);
  });
  // Lease heartbeat (D7): extend messages held longer than half the
  // visibility timeout since they were read, whether their handler runs or
  // they still wait for one.
  self->delayed_send(self, heartbeat_period(st.settings.visibility_timeout),
                     atom::heartbeat::value);
  return {
    [self](atom::run, std::vector<received_command>& batch) {
      auto& st = self->state;
      st.poller_idle = false;
      st.held += static_cast<int64_t>(batch.size());
      st.settings.counters->in_flight += static_cast<int64_t>(batch.size());
      if (st.settings.domain_in_flight)
        *st.settings.domain_in_flight += static_cast<int64_t>(batch.size());
      st.settings.counters->received += static_cast<int64_t>(batch.size());
      auto now = std::chrono::steady_clock::now();
      for (auto& rc : batch)
        st.backlog.push_back({std::move(rc), now});
      dispatch(self);
    },
    [self](atom::finish, db::finished_command& x) {
      // A claimed message that cannot run (e.g. undecodable): finish it.
      // It took one of the poller's credits but no handler.
      auto& st = self->state;
      st.held += 1;
      st.settings.counters->received += 1;
      self->send(st.completion, atom::finish::value, std::move(x));
      st.pending_credit += 1;
      flush_credit(self);
    },
    [self](atom::done, int64_t n) { committed(self, n); },
    [self](atom::credit_due, uint64_t epoch) {
      // Stale when the credits went out meanwhile.
      if (epoch == self->state.credit_epoch)
        flush_credit(self);
    },

    [self](atom::idle, int64_t credits_seen) {
      // Only an empty read made after the poller got every credit counts
      // (an older one raced with a credit that makes it read again).
      auto& st = self->state;
      st.poller_idle = credits_seen == st.credits_sent;
      maybe_finish_drain(self);
    },
    [self](atom::drain) -> caf::result<atom::done> {
      auto& st = self->state;
      if (!st.settings.tick || st.draining) {
        st.draining = true;
        if (st.poller) {
          self->send_exit(st.poller, caf::exit_reason::user_shutdown);
          st.poller = caf::actor{};
        }
        self->send(st.completion, atom::flush::value);
        self->send(st.retry, atom::flush::value);
      }
      if (st.held <= 0 && (st.draining || st.poller_idle))
        return atom::done::value;
      auto rp = self->make_response_promise<atom::done>();
      st.drain_waiters.push_back(rp);
      return rp;
    },
    [self](atom::heartbeat) {
      auto& st = self->state;
      auto vt = st.settings.visibility_timeout;
      self->delayed_send(self, heartbeat_period(vt), atom::heartbeat::value);
      // Held commands read at least half a visibility timeout ago, running
      // or still waiting for a handler.
      auto now = std::chrono::steady_clock::now();
      std::vector<int64_t> due;
      for (auto& [msg_id, run] : st.running)
        if (now - run.second >= vt / 2)
          due.push_back(msg_id);
      for (auto& w : st.backlog)
        if (now - w.read_at >= vt / 2)
          due.push_back(w.rc.msg_id);
      if (!due.empty())
        // keep_longer: never shorten a longer explicit extension (D7).
        self
          ->request(st.retry, caf::infinite, atom::extend::value,
                    std::move(due), static_cast<int>(vt.count()), true)
          .then([](int) {},
                [self](caf::error& err) {
                  spdlog::warn("{} lease heartbeat failed: {}", self->name(),
                               to_string(err));
                });
    },
  };
}

} // namespace cmdbus::actors
