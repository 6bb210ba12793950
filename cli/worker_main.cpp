// The worker program shared by `cmdbus worker` and applications' own
// workers: settings, checks before the start, the run, the exit codes.

#include "cmdbus/cli/worker_main.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <pthread.h>

#include "cmdbus/actors/exec/exec_handler.hpp"
#include "cmdbus/cli/failure.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/cli/program.hpp"
#include "cmdbus/cli/queues.hpp"
#include "cmdbus/config/help.hpp"
#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/log.hpp"
#include "cmdbus/sql/bundle.hpp"

namespace cmdbus {

namespace {

using namespace cli;

// The options of a worker program besides its settings (the command line
// only), after the settings' in --help.
const std::vector<config::option> program_options{
  {"--create", "",
   "create the command queue of a configured domain that does not exist "
   "(without it, such a domain stops the worker with exit code 2: a "
   "mistyped domain would otherwise get a queue nobody sends to)"},
  {"--json", "", "print the final counters as JSON"},
  {"--progress", "",
   "print a progress line every 2 s (time, counters, commands completed per "
   "second since the line before) even when standard output is not a "
   "terminal, and with --tick"},
  {"--quiet", "",
   "no progress lines (the default when standard output is not a terminal, "
   "e.g. under systemd: the log then shows state changes only)"},
};

constexpr const char* worker_exit_codes = R"(
Exit codes: 0 ok (with --tick: no command went to the troubleshooting queue
and none is left in the queues), 1 usage error, invalid setting, or a domain
this program has no handlers for (checked before connecting), 2 a domain's
queue does not exist (see --create), 3 database unavailable, 4 other failure
(e.g. a database without the cmdbus schema, or with migrations pending), 5
with --tick: commands went to the troubleshooting queue during the run, or
remain in the queues afterwards (retries not due yet, or held by another
worker), 6 login refused, 8 with --tick: a budget (--tick-max-duration,
--tick-runner-max-duration, --tick-runner-max-items) cut the run short, so
work may be left for the next run (it wins over 5).
)";

// The flags a worker program accepts besides its settings: the common ones,
// the program's own and the log options (which program_main takes before
// the settings are read; listed here for --help).
std::vector<config::option> flags_of(const worker_program& program) {
  auto flags = program_options;
  for (const auto& f : program.flags)
    flags.push_back({f.name, "", f.help});
  return flags;
}

std::string counters_text(const worker_stats& s) {
  return "received " + std::to_string(s.received) + ", completed "
         + std::to_string(s.completed) + ", retried "
         + std::to_string(s.retried) + ", to TSQ "
         + std::to_string(s.moved_to_tsq) + ", failed "
         + std::to_string(s.failed) + ", rejected " + std::to_string(s.rejected)
         + ", in flight " + std::to_string(s.in_flight);
}

// Prints a progress line every 2 s while it lives, and a last one when it
// ends: UTC time, the counters, and the commands completed per second since
// the line before.
class progress_printer {
public:
  explicit progress_printer(const worker& w) : w_(w) {
    thread_ = std::thread([this] {
      auto next = std::chrono::steady_clock::now();
      while (!done_) {
        next += std::chrono::seconds{2};
        while (!done_ && std::chrono::steady_clock::now() < next)
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
        if (!done_)
          print();
      }
    });
  }

  ~progress_printer() {
    done_ = true;
    thread_.join();
    print();
  }

  progress_printer(const progress_printer&) = delete;
  progress_printer& operator=(const progress_printer&) = delete;

private:
  void print() {
    auto now = std::chrono::steady_clock::now();
    auto s = w_.stats();
    double secs = std::chrono::duration<double>(now - last_time_).count();
    double rate = secs > 0
                    ? static_cast<double>(s.completed - last_completed_) / secs
                    : 0.0;
    last_time_ = now;
    last_completed_ = s.completed;
    auto t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char rate_text[32];
    std::snprintf(rate_text, sizeof rate_text, "%.1f", rate);
    std::cout << stamp << " " << counters_text(s) << ", " << rate_text
              << " completed/s" << std::endl;
  }

  const worker& w_;
  std::atomic<bool> done_{false};
  std::chrono::steady_clock::time_point last_time_
    = std::chrono::steady_clock::now();
  decltype(worker_stats{}.completed) last_completed_{0};
  std::thread thread_;
};

// Prints the counters; `remaining` (tick mode) is the number of messages
// still in the domains' queues: not due yet (retries backing off) or held
// by another worker.
void print_stats(const worker_stats& s, bool json,
                 std::optional<int64_t> remaining = std::nullopt,
                 const tick_report* report = nullptr) {
  if (json) {
    json_out out;
    out.begin_object()
      .field("received", s.received)
      .field("completed", s.completed)
      .field("retried", s.retried)
      .field("moved_to_tsq", s.moved_to_tsq)
      .field("failed", s.failed)
      .field("rejected", s.rejected)
      .field("in_flight", s.in_flight);
    if (remaining)
      out.field("remaining", *remaining);
    if (report) {
      out.field("cut", report->cut());
      out.key("runners").begin_array();
      for (auto& r : report->runners)
        out.begin_object()
          .field("name", r.name)
          .field("items", r.items)
          .field("steps", r.steps)
          .field("stop", std::string{to_string(r.stop)})
          .field("ms", static_cast<int64_t>(r.took.count()))
          .end_object();
      out.end_array();
    }
    out.end_object();
    out.print(std::cout);
    return;
  }
  // The runners in text only when a budget cut the run short (the log
  // has a line per runner in any case): the usual output stays one line.
  if (report && report->cut())
    for (auto& r : report->runners)
      std::cout << "runner " << r.name << ": " << r.items << " item(s) in "
                << r.steps << " step(s), " << r.took.count() << " ms, "
                << to_string(r.stop) << std::endl;
  std::cout << counters_text(s);
  if (remaining)
    std::cout << ", remaining in the queue " << *remaining
              << (*remaining > 0 ? " (not due yet, or held by another worker)"
                                 : "");
  std::cout << std::endl;
}

// Throws unless every migration of this build is applied: without them the
// worker's statements fail, and it would retry them forever.
void require_schema(db::pool& pool) {
  auto conn = pool.acquire();
  auto report = db::migration_status(*conn, sql::pgmq_files(),
                                     sql::commandbus_files());
  auto applied = std::any_of(report.migrations.begin(), report.migrations.end(),
                             [](const auto& m) { return m.applied; });
  if (!applied)
    throw exit_with{exit_failed, never_migrated};
  if (auto pending = report.pending(); pending > 0)
    throw exit_with{exit_failed, "the database lacks " + std::to_string(pending)
                                   + " cmdbus migration(s): run `cmdbus "
                                     "migrate` first"};
}

// Counts the messages left in the domains' command queues (with a shard:
// in its share only), or nothing when the database cannot tell (logged).
std::optional<int64_t> remaining_messages(const config::worker_config& cfg) {
  try {
    db::connection_options opts;
    opts.application_name = "cmdbus-worker";
    opts.pooler = cfg.pooler;
    int64_t n = 0;
    for (auto& group : config::group_by_dsn(cfg, cfg.domains)) {
      auto conn = db::connection::open(group.dsn, opts);
      for (auto& d : group.domains)
        if (cfg.tick_shard_count > 1)
          // The queue's name is validated (db::command_queue).
          n += conn
                 .query("SELECT count(*) FROM pgmq.q_" + db::command_queue(d)
                          + " WHERE msg_id % $1 = $2",
                        int64_t{cfg.tick_shard_count},
                        int64_t{cfg.tick_shard_index})
                 .int64(0, 0);
        else
          n += conn
                 .query("SELECT queue_length FROM pgmq.metrics($1)",
                        db::command_queue(d))
                 .int64(0, 0);
    }
    return n;
  } catch (const std::exception& e) {
    log::warn("tick: could not count the messages left: {}",
              log::one_line(e.what()));
    return std::nullopt;
  }
}

// The help text: the settings' help under the program's name, what the
// program serves, the options of the command line only, the exit codes.
std::string help_text(const worker_program& program) {
  auto options = flags_of(program);
  options.push_back(log_level_option);
  options.push_back(log_format_option);
  return config::detail::worker_help(
    {program.name, program.description, options, worker_exit_codes});
}

// Refuses the domains that got neither a handler nor a process type (unless
// remote handler pools are configured, which may serve them): the
// worker would take their commands, fail each with HandlerNotFoundError and
// use up their attempts.
void refuse_domains_without_handlers(const config::worker_config& cfg,
                                     const handler_registry& handlers,
                                     const process_registry& processes,
                                     const worker_program& program) {
  // With remote handler pools, the nodes serve what is not handled here.
  if (!cfg.remote.pools.empty())
    return;
  auto keys = handlers.keys();
  std::vector<std::string> empty;
  for (auto& d : cfg.domains) {
    bool has_handler = std::any_of(keys.begin(), keys.end(),
                                   [&](const auto& k) { return k.first == d; });
    if (!has_handler && processes.types(d).empty())
      empty.push_back("'" + d + "'");
  }
  if (empty.empty())
    return;
  std::string names;
  for (auto& n : empty)
    names += (names.empty() ? "" : ", ") + n;
  bool several = empty.size() > 1;
  throw usage_error{
    std::string{"no handlers for domain"} + (several ? "s " : " ") + names
    + ": this worker would fail " + (several ? "their" : "its")
    + " commands with HandlerNotFoundError and use up their attempts"
    + (program.no_handlers_hint.empty() ? ""
                                        : "; " + program.no_handlers_hint)};
}

} // namespace

int run_worker(const std::vector<std::string>& argv,
               const worker_program& program) {
  config::worker_config cfg;
  std::vector<std::string> given;
  try {
    cfg = config::detail::load(
      config::detail::worker_table(), argv,
      [](const char* name) -> std::optional<std::string> {
        if (const char* v = std::getenv(name))
          return std::string{v};
        return std::nullopt;
      },
      flags_of(program), &given);
  } catch (const config::help_requested&) {
    std::cout << help_text(program);
    return exit_ok;
  } catch (const config::config_error& e) {
    throw usage_error{e.what()};
  }
  auto flag = [&](const char* name) {
    return std::find(given.begin(), given.end(), name) != given.end();
  };
  bool json = flag("--json");
  // Progress lines on a terminal, or when asked for; under systemd the
  // log shows state changes only.
  bool progress_on = !flag("--quiet")
                     && (flag("--progress") || (!json && stdout_is_terminal()));
  if (cfg.dump_config) {
    std::cout << config::describe(cfg);
    return exit_ok;
  }
  // The program's handlers, before any database access: a domain without
  // any is refused at once.
  handler_registry registry;
  process_registry processes;
  if (program.register_domain)
    for (auto& d : cfg.domains)
      program.register_domain(d, registry, processes);
  // The external programs (--exec, [domains.NAME.exec]) of any worker
  // program; a type that also has a handler of the program's own is
  // refused.
  for (auto& d : cfg.domains) {
    try {
      exec::add_exec_handlers(registry, cfg.exec, d);
    } catch (const handler_already_registered_error& e) {
      throw usage_error{std::string{"exec: "} + e.what()
                        + " (by the program itself)"};
    }
  }
  refuse_domains_without_handlers(cfg, registry, processes, program);
  if (!cfg.api.listen.empty() && !program.serve_api)
    throw usage_error{program.name + " does not serve the command API: "
                      "remove [api] listen (--api), and run `cmdbus api` or "
                      "`cmdbus worker --api` for it"};
  // The schema must be up to date, and every configured domain's queue
  // must exist (or be created now), on each database the domains live on.
  for (auto& group : config::group_by_dsn(cfg, cfg.domains)) {
    db::pool_options popts;
    popts.dsn = group.dsn;
    popts.max_size = 1;
    popts.connection.application_name = "cmdbus-worker";
    popts.connection.pooler = cfg.pooler;
    // The one failure is the program's error; no backoff log.
    popts.log_failures = false;
    db::pool pool{popts};
    require_schema(pool);
    for (auto& d : group.domains)
      require_queue(pool, db::command_queue(d), flag("--create"));
  }
  auto shutdown_timeout = cfg.shutdown_timeout;
  bool tick = cfg.tick;
  worker w{cfg, std::move(registry), std::move(processes)};
  if (program.on_worker)
    program.on_worker(w);
  if (tick) {
    tick_result result;
    {
      std::optional<progress_printer> progress;
      if (progress_on)
        progress.emplace(w);
      try {
        result = w.run_tick_runners(std::chrono::hours{24});
      } catch (const std::invalid_argument& e) {
        // An unknown runner name in [tick] runners.
        throw usage_error{e.what()};
      }
    }
    auto remaining = remaining_messages(cfg);
    print_stats(result.stats, json, remaining, &result.report);
    // A budget cut the run short: work may be left for the next run.
    if (result.report.cut())
      return exit_budget;
    // Not all done: some went to the troubleshooting queue, or some are
    // left (or, when they could not be counted, may be).
    return result.stats.moved_to_tsq > 0 || remaining.value_or(1) > 0
             ? exit_incomplete
             : exit_ok;
  }
  // Block SIGINT/SIGTERM in every thread; this one waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // The command API beside it, started first: without tokens, or on a
  // port that is taken, the worker does not start at all. (What it takes
  // meanwhile waits in the queue for the worker, a moment later.)
  std::shared_ptr<void> api;
  if (!cfg.api.listen.empty()) {
    try {
      api = program.serve_api(cfg);
    } catch (const std::runtime_error& e) {
      throw exit_with{exit_failed, e.what()};
    }
  }
  w.start();
  std::optional<progress_printer> progress;
  if (progress_on)
    progress.emplace(w);
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("signal {}: stopping (up to {} ms)", sig, shutdown_timeout.count());
  if (api) {
    api.reset();
    log::info("the command API has stopped");
  }
  w.stop(shutdown_timeout).get();
  progress.reset();
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

int worker_main(int argc, char** argv, const worker_program& program) {
  return program_main(argc, argv, program.name, "worker",
                      [&](const std::vector<std::string>& args) {
                        return run_worker(args, program);
                      });
}

} // namespace cmdbus
