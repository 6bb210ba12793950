#include "tests/support/worker_env.hpp"

namespace cmdbus::test {

config::worker_config make_cfg(const strings& domains, int concurrency) {
  config::worker_config cfg;
  cfg.dsn = dsn();
  cfg.domains = domains;
  cfg.concurrency = concurrency;
  cfg.visibility_timeout = 5s;
  cfg.poll_interval = 100ms;
  cfg.use_notify = true;
  cfg.statement_timeout = 2s;
  cfg.shutdown_timeout = 5s;
  cfg.flush_interval = 2ms;
  cfg.retry.max_attempts = 3;
  cfg.retry.backoff_seconds = {0};
  cfg.retry.jitter = 0.0;
  return cfg;
}

json null_result(const command&, handler_context&) {
  return json::null();
}

void stop_worker(worker& w, std::chrono::milliseconds timeout) {
  if (w.is_running())
    w.stop(timeout).get();
}

} // namespace cmdbus::test
