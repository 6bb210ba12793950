#include "cmdbus/actors/worker/spawn.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>

#include "cmdbus/actors/worker/completion.hpp"
#include "cmdbus/actors/worker/handler.hpp"
#include "cmdbus/actors/worker/poller.hpp"
#include "cmdbus/actors/worker/remote_link.hpp"
#include "cmdbus/actors/worker/retry_scheduler.hpp"
#include "cmdbus/actors/worker/supervisor.hpp"
#include "cmdbus/model/backoff.hpp"

namespace cmdbus::actors {

session_options session_for(const domain_settings& settings,
                            const char* application_name) {
  session_options opts;
  opts.dsn = config::dsn_for(*settings.cfg, settings.domain);
  opts.statement_timeout = settings.cfg->statement_timeout;
  opts.application_name = application_name;
  opts.pooler = settings.cfg->pooler;
  return opts;
}

std::shared_ptr<std::atomic<int64_t>>
db_error_counter(const domain_settings& settings, db_actor actor) {
  // Shares the ownership of the metrics it points into.
  return {settings.metrics, &settings.metrics->db_errors(actor)};
}

std::chrono::milliseconds stuck_after(const domain_settings& settings) {
  return 3 * settings.cfg->statement_timeout;
}

int64_t hold_limit(int64_t capacity) {
  return 4 * capacity;
}

int backoff_seconds(const config::retry_config& retry, int attempt,
                    std::mt19937_64& rng) {
  // The command's own max_attempts decides exhaustion; the schedule gives
  // the delay, clamped to its last entry.
  auto base = backoff::from_schedule(retry.backoff_seconds, attempt, 30);
  if (retry.jitter <= 0 || base <= 0)
    return base;
  auto value = std::lround(
    backoff::jitter(base, 1.0 - retry.jitter, 1.0 + retry.jitter, rng));
  return std::max(0, static_cast<int>(value));
}

namespace {

completion_actor spawn_completion(supervisor_actor::pointer parent,
                                  const domain_settings& settings) {
  auto writer = spawn_completion_writer(parent->system(), settings,
                                        supervisor_actor{parent}, {}, true);
  parent->link_to(writer);
  return writer;
}

retry_scheduler_actor spawn_retry(supervisor_actor::pointer parent,
                                  const domain_settings& settings) {
  auto writer = spawn_retry_writer(parent->system(), settings,
                                   supervisor_actor{parent}, {}, {}, true);
  parent->link_to(writer);
  return writer;
}

} // namespace

spawners default_spawners() {
  return {spawn_poller, spawn_completion, spawn_handler, spawn_retry,
          spawn_remote_link};
}

supervisor_actor spawn_supervisor(root_actor::pointer root,
                                  const domain_settings& settings) {
  return root->spawn<caf::linked>(supervisor, settings, default_spawners(),
                                  batch_listener_actor{root_actor{root}});
}

} // namespace cmdbus::actors
