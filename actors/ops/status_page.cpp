#include "cmdbus/actors/ops/status_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace cmdbus {

namespace {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

// "3.2 s", "4 min 10 s", "2 h 5 min".
std::string age_text(double secs) {
  auto s = static_cast<int64_t>(std::llround(secs));
  if (secs < 10)
    return fixed(secs, 1) + " s";
  if (s < 60)
    return std::to_string(s) + " s";
  if (s < 3600)
    return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string(s % 3600 / 60)
         + " min";
}

std::string state_class(health_state st) {
  switch (st) {
    case health_state::healthy: return "healthy";
    case health_state::degraded: return "degraded";
    default: return "critical";
  }
}

constexpr const char* style = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#f6f7f9}
h1{font-size:1.3em;margin:0 0 .2em}
.meta{color:#5a6372;margin-bottom:1em}
table{border-collapse:collapse;background:#fff;margin-bottom:1.2em;min-width:60%}
th,td{border:1px solid #d5d9e0;padding:.35em .7em;text-align:left;vertical-align:top}
th{background:#eceff3;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:.1em .6em;border-radius:.8em;font-weight:600;color:#fff}
.healthy{background:#2e7d32}.degraded{background:#ed8b00}.critical{background:#c62828}
ul.reasons{margin:.3em 0 0;padding-left:1.2em;color:#5a6372}
.bar{background:#e3e7ee;border-radius:3px;height:.6em;width:8em;display:inline-block;margin-left:.5em}
.bar span{display:block;height:100%;background:#3f6fd8;border-radius:3px}
.note{color:#a33}
)";

void domain_row(std::string& out, const domain_status& d) {
  auto& name = d.health.domain;
  out += "<tr id=\"domain-" + html_escape(name) + "\"><td>" + html_escape(name)
         + "</td><td><span class=\"badge " + state_class(d.health.state)
         + "\" data-field=\"health\">" + to_string(d.health.state) + "</span>";
  if (!d.health.reasons.empty()) {
    out += "<ul class=\"reasons\">";
    for (auto& r : d.health.reasons)
      out += "<li>" + html_escape(r) + "</li>";
    out += "</ul>";
  }
  auto all_slots = d.slots + d.remote_slots;
  auto used = all_slots > 0 ? 100.0 * static_cast<double>(d.in_flight)
                                / static_cast<double>(all_slots)
                            : 0.0;
  // Remote handler pools, when the domain has any: their slots and how
  // many are connected.
  std::string remote;
  if (d.remote_pools > 0 || d.remote_disconnects > 0)
    remote = " + <span data-field=\"remote-slots\">"
             + std::to_string(d.remote_slots)
             + "</span> remote (<span data-field=\"remote-pools\">"
             + std::to_string(d.remote_pools) + "</span> pools)";
  out += "</td><td class=\"num\"><span data-field=\"in-flight\">"
         + std::to_string(d.in_flight) + "</span> / <span data-field=\"slots\">"
         + std::to_string(d.slots) + "</span>" + remote
         + "<span class=\"bar\"><span style=\"width:"
         + fixed(std::min(used, 100.0), 0) + "%\"></span></span></td>";
  out += "<td class=\"num\" data-field=\"throughput\">"
         + (d.finished_per_second ? fixed(*d.finished_per_second, 1) + " /s"
                                  : std::string{"&ndash;"})
         + "</td>";
  if (d.queue && d.queue->queue_exists) {
    out += "<td class=\"num\" data-field=\"queue-depth\">"
           + std::to_string(d.queue->depth) + "</td><td class=\"num\" "
           + "data-field=\"visible\">" + std::to_string(d.queue->visible)
           + "</td><td class=\"num\" data-field=\"oldest-age\">"
           + (d.queue->oldest_visible_age_sec
                ? age_text(*d.queue->oldest_visible_age_sec)
                : std::string{"&ndash;"})
           + "</td>";
  } else {
    out += "<td class=\"num\" colspan=\"3\">&ndash;</td>";
  }
  out += "<td class=\"num\" data-field=\"tsq\">"
         + (d.queue ? std::to_string(d.queue->tsq) : std::string{"&ndash;"})
         + "</td></tr>\n";
}

void outcomes_table(std::string& out, const status_snapshot& s) {
  out += "<h2>Outcomes since start</h2>\n<table id=\"outcomes\"><tr><th>"
         "Domain</th><th>Command type</th><th>Completed</th><th>Failed</th>"
         "<th>Retried</th><th>To TSQ</th><th>Mean duration</th></tr>\n";
  for (auto& d : s.domains)
    for (auto& t : d.types) {
      auto mean = t.duration.count > 0
                    ? fixed(1000 * t.duration.sum_seconds
                              / static_cast<double>(t.duration.count),
                            1)
                        + " ms"
                    : std::string{"&ndash;"};
      out += "<tr><td>" + html_escape(d.health.domain) + "</td><td>"
             + html_escape(t.command_type) + "</td><td class=\"num\">"
             + std::to_string(t.completed) + "</td><td class=\"num\">"
             + std::to_string(t.failed) + "</td><td class=\"num\">"
             + std::to_string(t.retried) + "</td><td class=\"num\">"
             + std::to_string(t.moved_to_tsq) + "</td><td class=\"num\">" + mean
             + "</td></tr>\n";
    }
  out += "</table>\n";
}

// The live processes by domain, type and status.
void processes_table(std::string& out, const status_snapshot& s) {
  out += "<h2>Processes in progress</h2>\n<table id=\"processes\"><tr><th>"
         "Domain</th><th>Process type</th><th>Status</th><th>Processes</th>"
         "</tr>\n";
  if (s.processes.empty())
    out += "<tr><td colspan=\"4\">none</td></tr>\n";
  for (auto& p : s.processes)
    out += "<tr><td>" + html_escape(p.domain) + "</td><td>"
           + html_escape(p.process_type) + "</td><td>" + html_escape(p.status)
           + "</td><td class=\"num\">" + std::to_string(p.count)
           + "</td></tr>\n";
  out += "</table>\n";
}

template <class Build>
std::string json_text(Build build) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w{buf};
  build(w);
  return std::string{buf.GetString(), buf.GetSize()};
}

} // namespace

std::string render_status_page(const status_snapshot& s) {
  std::string out;
  out.reserve(8192);
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta http-equiv=\"refresh\" content=\""
         + std::to_string(status_page_refresh_seconds)
         + "\"><title>cmdbus worker: " + to_string(s.state) + "</title><style>"
         + style + "</style></head><body>\n";
  out += "<h1>cmdbus worker <span class=\"badge " + state_class(s.state)
         + "\" id=\"worker-health\">" + to_string(s.state) + "</span></h1>\n";
  out += "<div class=\"meta\">version " + html_escape(s.version) + " &middot; "
         + "<span id=\"readiness\">" + html_escape(s.readiness) + "</span>"
         + " &middot; up " + age_text(s.uptime_seconds)
         + " &middot; refreshes every "
         + std::to_string(status_page_refresh_seconds) + " s</div>\n";
  if (!s.queue_error.empty())
    out += "<p class=\"note\" id=\"queue-error\">Queue figures unavailable: "
           + html_escape(s.queue_error) + "</p>\n";
  out += "<table id=\"domains\"><tr><th>Domain</th><th>Health</th><th>In "
         "flight / slots</th><th>Throughput (last min)</th><th>Queue depth"
         "</th><th>Visible</th><th>Oldest visible</th><th>TSQ</th></tr>\n";
  for (auto& d : s.domains)
    domain_row(out, d);
  out += "</table>\n";
  outcomes_table(out, s);
  if (s.has_processes)
    processes_table(out, s);
  out += "<div class=\"meta\">Machine-readable: <a href=\"/metrics\">/metrics"
         "</a> &middot; <a href=\"/healthz\">/healthz</a> &middot; "
         "<a href=\"/readyz\">/readyz</a></div>\n</body></html>\n";
  return out;
}

std::string render_health_json(const status_snapshot& s) {
  return json_text([&s](auto& w) {
    w.StartObject();
    w.Key("status");
    w.String(to_string(s.state));
    w.Key("domains");
    w.StartArray();
    for (auto& d : s.domains) {
      w.StartObject();
      w.Key("domain");
      w.String(d.health.domain.c_str());
      w.Key("status");
      w.String(to_string(d.health.state));
      w.Key("reasons");
      w.StartArray();
      for (auto& r : d.health.reasons)
        w.String(r.c_str());
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  });
}

std::string render_ready_json(const status_snapshot& s) {
  return json_text([&s](auto& w) {
    w.StartObject();
    w.Key("ready");
    w.Bool(s.ready);
    w.Key("state");
    w.String(s.readiness.c_str());
    w.Key("domains");
    w.StartArray();
    for (auto& d : s.domains) {
      w.StartObject();
      w.Key("domain");
      w.String(d.health.domain.c_str());
      w.Key("polling");
      w.Bool(d.polling);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  });
}

} // namespace cmdbus
