#include "cmdbus/actors/ops/exposition.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace cmdbus {

namespace {

using labels = std::vector<std::pair<const char*, std::string>>;

// Writes one family: its HELP and TYPE lines, then its samples.
class family_writer {
public:
  family_writer(std::string& out, const char* name, const char* type,
                const char* help)
    : out_(out), name_(name) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  /// One sample of the family (`suffix` for a histogram's _bucket, _sum
  /// and _count).
  void sample(const labels& ls, double value, const char* suffix = "") {
    out_ += name_;
    out_ += suffix;
    if (!ls.empty()) {
      out_ += '{';
      bool first = true;
      for (auto& [key, val] : ls) {
        if (!first)
          out_ += ',';
        first = false;
        out_ += key;
        out_ += "=\"";
        out_ += escape_label_value(val);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += sample_value(value);
    out_ += '\n';
  }

private:
  std::string& out_;
  const char* name_;
};

const char* outcome_names[] = {"completed", "failed", "retried",
                               "moved_to_tsq"};

int64_t outcome_count(const type_status& t, size_t i) {
  switch (i) {
    case 0: return t.completed;
    case 1: return t.failed;
    case 2: return t.retried;
    default: return t.moved_to_tsq;
  }
}

void write_commands(std::string& out, const status_snapshot& s) {
  family_writer f{out, "cmdbus_commands_total", "counter",
                  "Commands whose outcome was committed, by outcome "
                  "(completed, failed, retried, moved_to_tsq)."};
  for (auto& d : s.domains)
    for (auto& t : d.types)
      for (size_t i = 0; i < 4; ++i)
        f.sample({{"domain", d.health.domain},
                  {"command_type", t.command_type},
                  {"outcome", outcome_names[i]}},
                 static_cast<double>(outcome_count(t, i)));
}

void write_durations(std::string& out, const status_snapshot& s) {
  family_writer f{out, "cmdbus_handler_duration_seconds", "histogram",
                  "Time from handing a command to a handler to its outcome."};
  for (auto& d : s.domains)
    for (auto& t : d.types) {
      labels base{{"domain", d.health.domain},
                  {"command_type", t.command_type}};
      for (size_t i = 0; i <= duration_buckets.size(); ++i) {
        auto ls = base;
        ls.emplace_back("le", i < duration_buckets.size()
                                ? sample_value(duration_buckets[i])
                                : std::string{"+Inf"});
        f.sample(ls, static_cast<double>(t.duration.cumulative[i]), "_bucket");
      }
      f.sample(base, t.duration.sum_seconds, "_sum");
      f.sample(base, static_cast<double>(t.duration.count), "_count");
    }
}

// A family with one sample per domain.
template <class Get>
void per_domain(std::string& out, const status_snapshot& s, const char* name,
                const char* type, const char* help, Get get) {
  family_writer f{out, name, type, help};
  for (auto& d : s.domains)
    f.sample({{"domain", d.health.domain}}, static_cast<double>(get(d)));
}

// A family with one sample per command queue whose figures were read.
template <class Get>
void per_queue(std::string& out, const status_snapshot& s, const char* name,
               const char* help, Get get) {
  family_writer f{out, name, "gauge", help};
  for (auto& d : s.domains)
    if (d.queue && d.queue->queue_exists)
      f.sample({{"queue", d.queue->queue}}, get(*d.queue));
}

} // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string sample_value(double x) {
  if (std::isnan(x))
    return "NaN";
  if (std::isinf(x))
    return x > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (x == std::floor(x) && std::fabs(x) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", x);
    return buf;
  }
  // The shortest of %.15g..%.17g that reads back exactly.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  return buf;
}

std::string render_metrics(const status_snapshot& s) {
  std::string out;
  out.reserve(4096);
  write_commands(out, s);
  per_domain(out, s, "cmdbus_commands_received_total", "counter",
             "Messages handed to the domain's handlers.",
             [](const domain_status& d) { return d.received; });
  write_durations(out, s);
  per_domain(out, s, "cmdbus_in_flight", "gauge",
             "Commands read and not yet handled.",
             [](const domain_status& d) { return d.in_flight; });
  per_domain(out, s, "cmdbus_prefetch", "gauge",
             "Messages read ahead of free handler slots at most (the fixed "
             "prefetch, or the one prefetch = auto chose last).",
             [](const domain_status& d) { return d.prefetch; });
  per_domain(out, s, "cmdbus_handler_slots", "gauge",
             "Handler slots (the worker's concurrency).",
             [](const domain_status& d) { return d.slots; });
  per_queue(out, s, "cmdbus_queue_depth",
            "Messages in the command queue, visible or not.",
            [](const db::queue_figures& q) {
              return static_cast<double>(q.depth);
            });
  per_queue(out, s, "cmdbus_queue_visible", "Messages a worker may read now.",
            [](const db::queue_figures& q) {
              return static_cast<double>(q.visible);
            });
  per_queue(out, s, "cmdbus_queue_scheduled",
            "Messages of delayed commands not due yet (never read, invisible "
            "until their not-before time); not part of the visible backlog.",
            [](const db::queue_figures& q) {
              return static_cast<double>(q.scheduled);
            });
  per_queue(out, s, "cmdbus_queue_oldest_visible_age_seconds",
            "Age of the oldest visible message (0 when none is visible).",
            [](const db::queue_figures& q) {
              return q.oldest_visible_age_sec.value_or(0.0);
            });
  {
    family_writer f{out, "cmdbus_tsq_commands", "gauge",
                    "Commands in the troubleshooting queue."};
    for (auto& d : s.domains)
      if (d.queue)
        f.sample({{"domain", d.health.domain}},
                 static_cast<double>(d.queue->tsq));
  }
  if (s.has_processes) {
    family_writer f{out, "cmdbus_processes", "gauge",
                    "Processes not yet final, by type and status (read with "
                    "the queue figures)."};
    for (auto& p : s.processes)
      f.sample({{"domain", p.domain},
                {"process_type", p.process_type},
                {"status", p.status}},
               static_cast<double>(p.count));
  }
  {
    family_writer f{out, "cmdbus_queue_figures_up", "gauge",
                    "1 when the last read of the queue figures succeeded."};
    f.sample({}, s.queue_error.empty() ? 1 : 0);
  }
  {
    family_writer f{out, "cmdbus_db_errors_total", "counter",
                    "Failed database round trips (each retried with backoff), "
                    "by actor."};
    for (auto& d : s.domains)
      for (size_t i = 0; i < all_db_actors.size(); ++i)
        f.sample({{"domain", d.health.domain},
                  {"actor", to_string(all_db_actors[i])}},
                 static_cast<double>(d.db_errors[i]));
  }
  per_domain(out, s, "cmdbus_handler_restarts_total", "counter",
             "Handler actors that died and were replaced.",
             [](const domain_status& d) { return d.handler_restarts; });
  per_domain(out, s, "cmdbus_remote_slots", "gauge",
             "Handler slots of the connected remote pools (handler nodes).",
             [](const domain_status& d) { return d.remote_slots; });
  per_domain(out, s, "cmdbus_remote_pools", "gauge",
             "Remote handler pools connected now.",
             [](const domain_status& d) { return d.remote_pools; });
  per_domain(out, s, "cmdbus_remote_disconnects_total", "counter",
             "Remote handler pools lost (died, cut or silent); their "
             "running commands were made visible again at once.",
             [](const domain_status& d) { return d.remote_disconnects; });
  per_domain(out, s, "cmdbus_schedule_fired_total", "counter",
             "Recurring schedule slots that this worker fired (sent their "
             "command).",
             [](const domain_status& d) { return d.schedule_fired; });
  per_domain(out, s, "cmdbus_schedule_lateness_seconds_sum", "counter",
             "Summed lateness of the fired slots (slot time to firing, by "
             "the database server's clock); divided by "
             "cmdbus_schedule_fired_total, the mean.",
             [](const domain_status& d) {
               return static_cast<double>(d.schedule_lateness_us) / 1e6;
             });
  per_domain(out, s, "cmdbus_schedule_last_lateness_seconds", "gauge",
             "Lateness of the last slot this worker fired.",
             [](const domain_status& d) {
               return static_cast<double>(d.schedule_last_lateness_us) / 1e6;
             });
  per_domain(out, s, "cmdbus_health", "gauge",
             "Health of the domain: 0 healthy, 1 degraded, 2 critical.",
             [](const domain_status& d) {
               return static_cast<int>(d.health.state);
             });
  {
    family_writer f{out, "cmdbus_job_runs_total", "counter",
                    "Attempts of the singleton jobs, by outcome: ok (held the "
                    "lock and committed), skipped (another replica held it), "
                    "failed (rolled back)."};
    for (auto& j : s.jobs) {
      f.sample({{"job", j.name}, {"outcome", "ok"}},
               static_cast<double>(j.ran));
      f.sample({{"job", j.name}, {"outcome", "skipped"}},
               static_cast<double>(j.skipped));
      f.sample({{"job", j.name}, {"outcome", "failed"}},
               static_cast<double>(j.failed));
    }
  }
  if (s.retention) {
    {
      family_writer f{out, "cmdbus_retention_removed_total", "counter",
                      "Rows the housekeeping runner removed, by kind "
                      "(commands and their audit rows, processes and "
                      "theirs, batches and theirs, archived messages, the "
                      "command API's request fingerprints)."};
      for (auto& [kind, n] : s.retention->removed)
        f.sample({{"kind", kind}}, static_cast<double>(n));
    }
    {
      family_writer f{out, "cmdbus_retention_partitions_total", "counter",
                      "Partitions of partitioned queues the housekeeping "
                      "runner created ahead and dropped whole (past their "
                      "queue's retention), by action."};
      f.sample({{"action", "created"}},
               static_cast<double>(s.retention->partitions_created));
      f.sample({{"action", "dropped"}},
               static_cast<double>(s.retention->partitions_dropped));
    }
    {
      family_writer f{out, "cmdbus_retention_chunks_total", "counter",
                      "Chunks (transactions) the housekeeping runner "
                      "committed."};
      f.sample({}, static_cast<double>(s.retention->chunks));
    }
    {
      family_writer f{out, "cmdbus_retention_passes_total", "counter",
                      "Passes of the housekeeping runner that left nothing "
                      "old to remove."};
      f.sample({}, static_cast<double>(s.retention->passes));
    }
  }
  {
    family_writer f{out, "cmdbus_ready", "gauge",
                    "1 while the worker takes work (see /readyz)."};
    f.sample({}, s.ready ? 1 : 0);
  }
  {
    family_writer f{out, "cmdbus_build_info", "gauge",
                    "Always 1; the version is a label."};
    f.sample({{"version", s.version}}, 1);
  }
  return out;
}

} // namespace cmdbus
