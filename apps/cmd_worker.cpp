#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include <pthread.h>

#include "actors/worker.hpp"
#include "apps/cli.hpp"
#include "apps/demo_handlers.hpp"
#include "config/worker_config.hpp"
#include "db/connection.hpp"
#include "db/queue_name.hpp"
#include "model/log.hpp"

namespace cmdbus::cli {

namespace {

// Prints the counters; `remaining` (tick mode) is the number of messages
// still in the domains' queues: not due yet (retries backing off) or held
// by another worker.
void print_stats(const worker_stats& s, bool json,
                 std::optional<int64_t> remaining = std::nullopt) {
  if (json) {
    std::cout << "{\"received\":" << s.received
              << ",\"completed\":" << s.completed
              << ",\"retried\":" << s.retried
              << ",\"moved_to_tsq\":" << s.moved_to_tsq
              << ",\"failed\":" << s.failed << ",\"rejected\":" << s.rejected
              << ",\"in_flight\":" << s.in_flight;
    if (remaining)
      std::cout << ",\"remaining\":" << *remaining;
    std::cout << "}\n";
    return;
  }
  std::cout << "received " << s.received << ", completed " << s.completed
            << ", retried " << s.retried << ", to TSQ " << s.moved_to_tsq
            << ", failed " << s.failed << ", rejected " << s.rejected
            << ", in flight " << s.in_flight;
  if (remaining)
    std::cout << ", remaining in the queue " << *remaining
              << (*remaining > 0 ? " (not due yet, or held by another worker)"
                                 : "");
  std::cout << std::endl;
}

// Counts the messages left in the domains' command queues, or nothing when
// the database cannot tell (logged).
std::optional<int64_t> remaining_messages(const config::worker_config& cfg) {
  try {
    db::connection_options opts;
    opts.application_name = "cmdbus-worker";
    auto conn = db::connection::open(cfg.dsn, opts);
    int64_t n = 0;
    for (auto& d : cfg.domains)
      n += conn
             .query("SELECT queue_length FROM pgmq.metrics($1)",
                    db::command_queue(d))
             .int64(0, 0);
    return n;
  } catch (const std::exception& e) {
    log::warn("tick: could not count the messages left: {}",
              log::one_line(e.what()));
    return std::nullopt;
  }
}

} // namespace

int run_worker(const std::vector<std::string>& argv) {
  std::vector<std::string> args;
  bool json = false;
  bool quiet = false;
  for (auto& a : argv) {
    if (a == "--json")
      json = true;
    else if (a == "--quiet")
      quiet = true;
    else
      args.push_back(a);
  }
  config::worker_config cfg;
  try {
    cfg = config::load(args,
                       [](const char* name) -> std::optional<std::string> {
                         if (const char* v = std::getenv(name))
                           return std::string{v};
                         return std::nullopt;
                       });
  } catch (const config::help_requested&) {
    std::cout << config::worker_help()
              << "\nOutput: --json prints the final counters as JSON; "
                 "--quiet omits the progress lines.\n";
    return exit_ok;
  } catch (const config::config_error& e) {
    throw usage_error{e.what()};
  }
  if (cfg.dump_config) {
    std::cout << config::describe(cfg);
    return exit_ok;
  }
  handler_registry registry;
  for (auto& d : cfg.domains)
    demo::register_test_handler(registry, d);
  auto shutdown_timeout = cfg.shutdown_timeout;
  bool tick = cfg.tick;
  worker w{cfg, std::move(registry)};
  // Operators see batch completions in the log. Having a callback also
  // makes the worker record them for durable delivery (V005).
  w.on_batch_complete([](const std::string& domain, const uuid& batch_id) {
    log::info("batch {} of domain {} is complete", batch_id.to_string(),
              domain);
  });
  if (tick) {
    auto stats = w.run_tick(std::chrono::hours{24});
    print_stats(stats, json, remaining_messages(cfg));
    return exit_ok;
  }
  // Block SIGINT/SIGTERM in every thread; this one waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  w.start();
  std::atomic<bool> done{false};
  std::thread progress;
  if (!quiet && !json)
    progress = std::thread([&] {
      auto next = std::chrono::steady_clock::now();
      while (!done) {
        next += std::chrono::seconds{2};
        while (!done && std::chrono::steady_clock::now() < next)
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
        if (!done)
          print_stats(w.stats(), false);
      }
    });
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("signal {}: stopping (up to {} ms)", sig, shutdown_timeout.count());
  w.stop(shutdown_timeout).get();
  done = true;
  if (progress.joinable())
    progress.join();
  print_stats(w.stats(), json);
  if (w.in_flight_count() > 0) {
    // Handlers abandoned at the shutdown timeout are still running in the
    // background; their commands reappear after the visibility timeout.
    // Leave without running destructors under their feet.
    std::cout.flush();
    std::_Exit(exit_ok);
  }
  return exit_ok;
}

} // namespace cmdbus::cli
