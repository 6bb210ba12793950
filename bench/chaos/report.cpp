#include "bench/chaos/report.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace cmdbus::chaos {

namespace {

double since(clock::time_point from, clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void row(std::FILE* out, const char* what, int64_t n,
         const std::string& note = {}) {
  std::fprintf(out, "  %-32s %8lld%s%s\n", what, static_cast<long long>(n),
               note.empty() ? "" : "   ", note.c_str());
}

std::string num(int64_t n) {
  return std::to_string(n);
}

} // namespace

void print_table(std::FILE* out, const scenario_report& r) {
  std::fprintf(out, "== scenario %s (domain %s, %d workers): %.1f s\n",
               r.scenario.c_str(), r.domain.c_str(), r.workers, r.seconds);
  row(out, "sent", r.sent,
      "of " + num(r.planned) + " planned; " + num(r.sent_in_batches) + " in "
        + num(r.batches) + " batches, " + num(r.sent_with_reply)
        + " with reply_to; " + num(r.sending.failed_attempts)
        + " failed send attempts, " + num(r.sending.found_on_retry)
        + " found on retry");
  row(out, "not sent", r.unsent);
  row(out, "sends hung", r.sending.hung,
      "never returned; abandoned by the harness");
  row(out, "final", r.final_count);
  row(out, "not final, still queued", r.not_final_queued);
  row(out, "lost", r.lost, "neither final nor in the queue");
  row(out, "wrongly final", r.wrongly_final);
  std::string twice;
  for (auto& [event, n] : r.final_twice_by_event)
    twice += (twice.empty() ? "" : ", ") + event + " " + num(n);
  row(out, "completed twice", r.final_twice,
      twice.empty() ? std::string{} : "by audit event: " + twice);
  row(out, "replies missing", r.replies_missing,
      "of " + num(r.replies_expected) + " expected");
  row(out, "replies duplicated", r.replies_duplicated);
  row(out, "batch counters wrong", r.batch_counters_wrong,
      "of " + num(r.batches) + " batches, " + num(r.batches_final) + " final");
  row(out, "batch status wrong", r.batch_status_wrong);
  row(out, "batches missing", r.batches_missing);
  row(out, "batch callbacks not delivered", r.callbacks_missing,
      num(r.callbacks_repeated) + " delivered more than once");
  if (r.processes_planned > 0) {
    row(out, "processes not started", r.processes_unstarted,
        num(r.processes_started) + " of " + num(r.processes_planned)
          + " DemoOrder processes started in " + r.process_domain);
    row(out, "processes missing", r.processes_missing);
    row(out, "processes started twice", r.processes_twice);
    row(out, "processes not final", r.processes_not_final);
    row(out, "processes wrong", r.processes_wrong,
        "status or steps not those of their path");
  }
  if (!r.schedule_domain.empty()) {
    row(out, "schedule slots without a command", r.schedule_missing,
        "of " + num(r.schedule_slots) + " slots fired every second in "
          + r.schedule_domain);
    row(out, "schedule commands beyond one a slot", r.schedule_extra);
    row(out, "schedule commands not COMPLETED", r.schedule_not_completed);
  }
  row(out, "attempts beyond expected", r.attempts - r.expected_runs,
      "informational: " + num(r.attempts)
        + " attempts of the final "
          "commands for "
        + num(r.expected_runs) + " runs; " + num(r.attempts_not_final)
        + " attempts spent on those not final");
  std::string statuses;
  for (auto& [s, n] : r.statuses)
    statuses += (statuses.empty() ? "" : ", ") + s + " " + num(n);
  std::fprintf(out, "  statuses: %s\n", statuses.c_str());
  std::fprintf(out, "  faults (recovery: from the end of the fault until the "
                    "final count grew again):\n");
  for (auto& f : r.faults) {
    char rec[64];
    if (f.recovery_seconds)
      std::snprintf(rec, sizeof rec, "recovered after %.1f s",
                    *f.recovery_seconds);
    else
      std::snprintf(rec, sizeof rec, "NEVER recovered");
    std::fprintf(out, "    at %6.1f s  %-24s lasted %5.1f s, %s\n",
                 since(r.started, f.start), f.what.c_str(),
                 since(f.start, f.end), rec);
  }
  if (!r.node_kills.empty()) {
    std::fprintf(out,
                 "  node kills (commands in flight at the kill; of those, "
                 "the ones whose attempt was under way and that were read "
                 "again after it; when these were final):\n");
    for (auto& k : r.node_kills) {
      auto& f = r.faults.at(k.fault);
      char final_at[96] = "none final";
      if (k.last_final_seconds && k.median_final_seconds)
        std::snprintf(final_at, sizeof final_at,
                      "final %.2f s after the kill (median %.2f s)",
                      *k.last_final_seconds, *k.median_final_seconds);
      std::fprintf(out,
                   "    at %6.1f s  %-16s %3lld in flight, %3lld rerun, "
                   "%s%s\n",
                   since(r.started, f.start), f.what.c_str(),
                   static_cast<long long>(k.in_flight),
                   static_cast<long long>(k.read_again), final_at,
                   k.read_again_not_final > 0 ? ", some NEVER final" : "");
    }
    std::fprintf(out,
                 "    the workers made %lld command(s) of lost nodes visible "
                 "again at once (their logs); visibility timeout %.0f s\n",
                 static_cast<long long>(r.released_on_node_loss),
                 r.visibility_timeout_seconds);
  }
  std::fprintf(out,
               "  workers' /healthz (changes, seconds since the start)%s:\n",
               r.health_must_degrade
                 ? (r.health_degraded ? ", unwell during the faults"
                                      : ", NEVER unwell during the faults")
                 : "");
  for (auto& h : r.health_history)
    std::fprintf(out, "    %s\n", h.c_str());
  std::fprintf(out, "  sending took %.1f s (planned %.0f s)\n", r.send_seconds,
               r.planned_send_seconds);
  if (r.settled)
    std::fprintf(out, "  settled %.1f s after the last send\n",
                 r.settle_seconds);
  else
    std::fprintf(out, "  NOT settled %.1f s after the last send (deadline)\n",
                 r.settle_seconds);
  if (!r.sending.last_error.empty())
    std::fprintf(out, "  last send error: %s\n", r.sending.last_error.c_str());
  if (!r.duplicate_replies.empty()) {
    const size_t shown = 20;
    std::fprintf(out, "  duplicated replies:");
    for (size_t i = 0; i < r.duplicate_replies.size() && i < shown; ++i)
      std::fprintf(out, "%s %s", i % 4 == 0 ? "\n   " : "",
                   r.duplicate_replies[i].c_str());
    if (r.duplicate_replies.size() > shown)
      std::fprintf(out, "\n    and %zu more (all in --json)",
                   r.duplicate_replies.size() - shown);
    std::fprintf(out, "\n");
  }
  for (auto& e : r.examples)
    std::fprintf(out, "  example %s\n", e.c_str());
  auto failures = r.failures();
  if (failures.empty())
    std::fprintf(out, "  PASS\n");
  for (auto& f : failures)
    std::fprintf(out, "  FAIL: %s\n", f.c_str());
  std::fflush(out);
}

std::string to_json(const std::vector<scenario_report>& reports) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  auto field = [&](const char* k, int64_t v) {
    w.Key(k);
    w.Int64(v);
  };
  auto text = [&](const char* k, const std::string& v) {
    w.Key(k);
    w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
  };
  bool all_passed = true;
  w.StartObject();
  w.Key("scenarios");
  w.StartArray();
  for (auto& r : reports) {
    auto failures = r.failures();
    all_passed = all_passed && failures.empty();
    w.StartObject();
    text("scenario", r.scenario);
    text("domain", r.domain);
    field("workers", r.workers);
    w.Key("seconds");
    w.Double(r.seconds);
    w.Key("send_seconds");
    w.Double(r.send_seconds);
    w.Key("settled");
    w.Bool(r.settled);
    w.Key("settle_seconds");
    w.Double(r.settle_seconds);
    field("planned", r.planned);
    field("sent", r.sent);
    field("not_sent", r.unsent);
    field("sent_in_batches", r.sent_in_batches);
    field("sent_with_reply", r.sent_with_reply);
    field("failed_send_attempts", r.sending.failed_attempts);
    field("found_on_retry", r.sending.found_on_retry);
    field("sends_hung", r.sending.hung);
    field("final", r.final_count);
    field("not_final_queued", r.not_final_queued);
    field("lost", r.lost);
    field("wrongly_final", r.wrongly_final);
    field("completed_twice", r.final_twice);
    field("replies_expected", r.replies_expected);
    field("replies_missing", r.replies_missing);
    field("replies_duplicated", r.replies_duplicated);
    w.Key("duplicated_replies");
    w.StartArray();
    for (auto& d : r.duplicate_replies)
      w.String(d.c_str(), static_cast<rapidjson::SizeType>(d.size()));
    w.EndArray();
    field("batches", r.batches);
    field("batches_final", r.batches_final);
    field("batches_missing", r.batches_missing);
    field("batch_counters_wrong", r.batch_counters_wrong);
    field("batch_status_wrong", r.batch_status_wrong);
    field("batch_callbacks_missing", r.callbacks_missing);
    field("batch_callbacks_repeated", r.callbacks_repeated);
    field("attempts", r.attempts);
    field("expected_runs", r.expected_runs);
    field("attempts_not_final", r.attempts_not_final);
    field("processes_planned", r.processes_planned);
    field("processes_started", r.processes_started);
    field("processes_unstarted", r.processes_unstarted);
    field("processes_missing", r.processes_missing);
    field("processes_twice", r.processes_twice);
    field("processes_not_final", r.processes_not_final);
    field("processes_wrong", r.processes_wrong);
    field("schedule_slots", r.schedule_slots);
    field("schedule_missing", r.schedule_missing);
    field("schedule_extra", r.schedule_extra);
    field("schedule_not_completed", r.schedule_not_completed);
    w.Key("statuses");
    w.StartObject();
    for (auto& [s, n] : r.statuses)
      field(s.c_str(), n);
    w.EndObject();
    w.Key("faults");
    w.StartArray();
    for (auto& f : r.faults) {
      w.StartObject();
      text("what", f.what);
      w.Key("at_seconds");
      w.Double(since(r.started, f.start));
      w.Key("lasted_seconds");
      w.Double(since(f.start, f.end));
      w.Key("recovery_seconds");
      if (f.recovery_seconds)
        w.Double(*f.recovery_seconds);
      else
        w.Null();
      w.EndObject();
    }
    w.EndArray();
    w.Key("node_kills");
    w.StartArray();
    for (auto& k : r.node_kills) {
      w.StartObject();
      text("what", r.faults.at(k.fault).what);
      field("in_flight", k.in_flight);
      field("read_again", k.read_again);
      field("read_again_not_final", k.read_again_not_final);
      auto seconds = [&](const char* key, const std::optional<double>& v) {
        w.Key(key);
        if (v)
          w.Double(*v);
        else
          w.Null();
      };
      seconds("last_final_seconds", k.last_final_seconds);
      seconds("median_final_seconds", k.median_final_seconds);
      w.EndObject();
    }
    w.EndArray();
    field("released_on_node_loss", r.released_on_node_loss);
    w.Key("health_degraded_during_faults");
    w.Bool(r.health_degraded);
    w.Key("health_recovered");
    w.Bool(r.health_recovered);
    w.Key("health_history");
    w.StartArray();
    for (auto& h : r.health_history)
      w.String(h.c_str(), static_cast<rapidjson::SizeType>(h.size()));
    w.EndArray();
    w.Key("failures");
    w.StartArray();
    for (auto& f : failures)
      w.String(f.c_str(), static_cast<rapidjson::SizeType>(f.size()));
    w.EndArray();
    w.Key("passed");
    w.Bool(failures.empty());
    w.EndObject();
  }
  w.EndArray();
  w.Key("passed");
  w.Bool(all_passed);
  w.EndObject();
  return std::string{buf.GetString(), buf.GetSize()} + "\n";
}

} // namespace cmdbus::chaos
