#include "cmdbus/actors/worker/job_runner.hpp"

#include <algorithm>
#include <stdexcept>

#include <caf/all.hpp>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

std::chrono::steady_clock::time_point
next_due_after(std::chrono::steady_clock::time_point due,
               std::chrono::steady_clock::time_point now,
               std::chrono::milliseconds interval) {
  auto next = due + interval;
  return next > now ? next : now + interval;
}

void record_job_attempt(const job_entry& job, const db::job_result& res,
                        int64_t took_ms, const std::string& origin) {
  const auto& def = *job.def;
  auto& m = *job.metrics;
  auto lg = log::from(origin);
  switch (res.outcome) {
    case db::job_outcome::ran:
      m.ran.fetch_add(1, std::memory_order_relaxed);
      // A chunk of a job that works in chunks: one line per chunk would
      // flood the log.
      if (res.more)
        lg.debug("job {} ran in {} ms, more to do", def.name, took_ms);
      else
        lg.info("job {} ran in {} ms", def.name, took_ms);
      break;
    case db::job_outcome::skipped:
      m.skipped.fetch_add(1, std::memory_order_relaxed);
      lg.debug("job {} skipped: another replica holds its lock", def.name);
      break;
    case db::job_outcome::failed:
      m.failed.fetch_add(1, std::memory_order_relaxed);
      lg.warn("job {} failed after {} ms (rolled back; next run in {} ms): {}",
              def.name, took_ms, def.interval.count(), res.error);
      break;
  }
}

namespace {

using self_ptr = job_runner_actor::stateful_pointer<job_runner_state>;

job_runner_actor::behavior_type runner_behavior(self_ptr self);

int64_t ms_between(std::chrono::steady_clock::time_point a,
                   std::chrono::steady_clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

// Runs job `j` once, counts and logs what became of it, and sets when it
// is due next: after its busy interval when the run said more work is
// left, else at its interval (next_due_after).
void run_one(self_ptr self, job_runner_state::scheduled& j) {
  auto& st = self->state;
  auto start = self->clock().now();
  auto res = st.attempt(*j.job.def);
  auto now = self->clock().now();
  record_job_attempt(j.job, res, ms_between(start, now), st.name);
  j.next_due = res.more ? now + j.job.def->busy_interval
                        : next_due_after(j.next_due, now, j.job.def->interval);
}

// Arms the timer (the behaviour's idle timeout, not a delayed_send: a
// message pending in CAF's clock keeps a detached actor alive at shutdown).
void arm_timer(self_ptr self, std::chrono::steady_clock::time_point at) {
  auto& st = self->state;
  auto delay = std::max<int64_t>(1, ms_between(self->clock().now(), at));
  st.next_timeout = std::chrono::milliseconds{delay};
  self->become(runner_behavior(self));
}

// Runs the jobs that are due, then arms the timer for the next one. While
// the database is failing, the due jobs wait for the end of the session's
// backoff instead of failing at every interval (the outage is logged once
// by the session).
void run_due(self_ptr self) {
  auto& st = self->state;
  if (st.session->outage().backing_off()) {
    arm_timer(self, st.session->outage().retry_at());
    return;
  }
  for (auto& j : st.jobs) {
    if (j.next_due > self->clock().now())
      continue;
    if (st.session->outage().backing_off())
      break; // the database failed: the others wait for the backoff
    run_one(self, j);
  }
  if (st.session->outage().backing_off()) {
    auto retry = st.session->outage().retry_at();
    for (auto& j : st.jobs)
      j.next_due = std::max(j.next_due, retry);
  }
  if (st.jobs.empty())
    return;
  auto earliest = std::min_element(st.jobs.begin(), st.jobs.end(),
                                   [](const auto& a, const auto& b) {
                                     return a.next_due < b.next_due;
                                   })
                    ->next_due;
  arm_timer(self, earliest);
}

job_runner_actor::behavior_type runner_behavior(self_ptr self) {
  auto on_wakeup = [self](atom::wakeup) { run_due(self); };
  if (!self->state.next_timeout)
    return {on_wakeup};
  return {on_wakeup,
          caf::after(*self->state.next_timeout) >> [self] { run_due(self); }};
}

} // namespace

job_runner_actor::behavior_type
job_runner(job_runner_actor::stateful_pointer<job_runner_state> self,
           job_runner_settings settings, job_attempt_fn attempt) {
  auto& st = self->state;
  auto now = self->clock().now();
  for (auto& j : settings.jobs)
    st.jobs.push_back({std::move(j), now});
  st.session = std::make_unique<db_session>(
    st.name, std::move(settings.session), nullptr,
    [self] { return self->clock().now(); });
  if (attempt) {
    st.attempt = std::move(attempt);
  } else {
    st.attempt = [self](const job_definition& def) {
      auto& st = self->state;
      db::connection* conn = nullptr;
      try {
        conn = &st.session->get();
      } catch (const std::exception& e) {
        st.session->failed(e);
        return db::job_result{db::job_outcome::failed, log::one_line(e.what()),
                              true};
      }
      auto res = db::run_job_once(*conn, def);
      if (res.outcome == db::job_outcome::failed && res.unavailable)
        // Drops a broken connection (the next run reconnects) and logs the
        // outage once.
        st.session->failed(std::runtime_error(res.error));
      else
        st.session->succeeded();
      return res;
    };
  }
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.session->close();
    self->quit(em.reason);
  });
  self->send(self, atom::wakeup::value);
  return runner_behavior(self);
}

job_runner_actor spawn_job_runner(caf::actor_system& sys,
                                  job_runner_settings settings) {
  return sys.spawn<caf::detached>(job_runner, std::move(settings),
                                  job_attempt_fn{});
}

} // namespace cmdbus::actors
