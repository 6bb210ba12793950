#include "cmdbus/actors/ops/status_snapshot.hpp"

#include <algorithm>

namespace cmdbus {

namespace {

domain_status domain_of(const domain_source& src) {
  auto& m = *src.metrics;
  domain_status d;
  d.health = src.health;
  d.polling = src.polling;
  d.received = m.received.load();
  d.in_flight = m.in_flight.load();
  d.prefetch = m.prefetch.load();
  d.slots = m.slots();
  d.handler_restarts = m.handler_restarts.load();
  d.remote_slots = m.remote_slots.load();
  d.remote_pools = m.remote_pools.load();
  d.remote_disconnects = m.remote_disconnects.load();
  d.schedule_fired = m.schedule_fired.load();
  d.schedule_lateness_us = m.schedule_lateness_us.load();
  d.schedule_last_lateness_us = m.schedule_last_lateness_us.load();
  d.configured_pools = src.configured_pools;
  for (size_t a = 0; a < all_db_actors.size(); ++a)
    d.db_errors[a] = m.db_errors(all_db_actors[a]);
  outcome_totals totals;
  m.for_each_type([&](const std::string& name, const type_metrics& t) {
    type_status ts{name,
                   t.completed.load(),
                   t.failed.load(),
                   t.retried.load(),
                   t.moved_to_tsq.load(),
                   t.duration.read()};
    totals.completed += ts.completed;
    totals.failed += ts.failed;
    totals.retried += ts.retried;
    totals.moved_to_tsq += ts.moved_to_tsq;
    d.types.push_back(std::move(ts));
  });
  d.finished = totals.finished();
  d.finished_per_second = src.finished_per_second;
  return d;
}

} // namespace

status_snapshot build_status(const status_inputs& in) {
  status_snapshot s;
  s.version = in.version;
  s.ready = in.ready;
  s.readiness = in.readiness;
  s.uptime_seconds = in.uptime_seconds;
  for (auto& src : in.domains) {
    s.domains.push_back(domain_of(src));
    s.state = std::max(s.state, src.health.state);
  }
  for (auto* j : in.jobs)
    s.jobs.push_back(
      job_status{j->name, j->ran.load(), j->skipped.load(), j->failed.load()});
  if (auto* r = in.retention) {
    retention_status rs;
    rs.removed = {{"commands", r->commands.load()},
                  {"command_audits", r->command_audits.load()},
                  {"processes", r->processes.load()},
                  {"process_audits", r->process_audits.load()},
                  {"batches", r->batches.load()},
                  {"batch_audits", r->batch_audits.load()},
                  {"archived_messages", r->archived_messages.load()},
                  {"api_requests", r->api_requests.load()}};
    rs.partitions_created = r->partitions_created.load();
    rs.partitions_dropped = r->partitions_dropped.load();
    rs.chunks = r->chunks.load();
    rs.passes = r->passes.load();
    s.retention = std::move(rs);
  }
  return s;
}

} // namespace cmdbus
