// `cmdbus cluster`: the admin actors of workers and handler nodes (their
// [admin] listen / --admin port) seen from one place: `status` asks each
// for its figures, `drain` asks a worker to stop taking new work and waits
// until it is idle (rolling deploys). No database access.

#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>

#include <rapidjson/document.h>

#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "apps/output.hpp"
#include "cmdbus/actors/ops/admin.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/config/network_config.hpp"
#include "cmdbus/config/settings.hpp"

namespace cmdbus::cli {

namespace {

constexpr const char* cluster_synopsis
  = R"(usage: cmdbus cluster status --nodes HOST:PORT[,HOST:PORT...] [options]
       cmdbus cluster drain --node HOST:PORT [--timeout DURATION] [options]

Talks to the admin ports of workers ([admin] listen, --admin) and handler
nodes (cmdbus node --admin); no database access.

  status   one row per address: kind, readiness, health, domains, handler
           slots (local+remote), commands in flight, commands handled per
           second over the last minute, connected remote pools; an address
           that does not answer is flagged UNREACHABLE with the reason
  drain    asks a worker to stop taking new work (its pollers stop, its
           running commands finish; it stays up, not ready, until stopped)
           and waits until it is idle; a handler node refuses (it takes no
           work of its own: drain the workers that use it)
)";

constexpr const char* cluster_epilogue = R"(
The --tls-* options give the certificate set when the admin ports use TLS
(else $CMDBUS_TLS_*).

Exit codes: 0 ok (status: every address answered; drain: the worker is
idle), 1 usage error, 4 refused (drain of a handler node, another admin
protocol) or cannot start the network, 5 status: some address unreachable,
or drain: the worker is unreachable, 7 drain: not idle within --timeout.
)";

constexpr option nodes_option{
  "--nodes", "LIST",
  "status: comma-separated HOST:PORT addresses (repeatable)"};
constexpr option node_option{"--node", "HOST:PORT",
                             "drain: the worker's admin address"};
constexpr option timeout_option{
  "--timeout", "DURATION",
  "status: per address, connecting and answering (default 3s); drain: until "
  "idle (default 60s)"};
constexpr option json_option{
  "--json", "",
  "status: an array of {\"address\", \"reachable\", \"status\" | "
  "\"error\"}; drain: {\"address\", \"idle\", \"seconds\", \"status\"}"};

// The options of a subcommand: its own, then the TLS set, --json and --help.
std::vector<option> options_with(std::vector<option> own) {
  auto tls = config::detail::tls_options();
  own.insert(own.end(), tls.begin(), tls.end());
  own.insert(own.end(), {json_option, help_option});
  return own;
}

const command_spec cluster_command{
  cluster_synopsis, options_with({nodes_option, node_option, timeout_option}),
  cluster_epilogue, false};

const command_spec status_command{cluster_synopsis,
                                  options_with({nodes_option, timeout_option}),
                                  cluster_epilogue, false};

const command_spec drain_command{cluster_synopsis,
                                 options_with({node_option, timeout_option}),
                                 cluster_epilogue, false};

std::vector<std::string> split_list(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (auto& v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      auto comma = v.find(',', start);
      auto item = v.substr(start, comma == std::string::npos ? std::string::npos
                                                             : comma - start);
      if (!item.empty())
        out.push_back(item);
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
  }
  return out;
}

actors::network_settings network_of(const args& a) {
  actors::network_settings net;
  // Heartbeats often enough for a process with the shortest heartbeat
  // interval allowed (100 ms, silent for 300 ms: cut).
  net.heartbeat = std::chrono::milliseconds{250};
  config::apply_tls_env(net.tls,
                        [](const char* name) -> std::optional<std::string> {
                          if (auto* v = std::getenv(name))
                            return std::string{v};
                          return std::nullopt;
                        });
  if (auto v = a.option("--tls-certificate"))
    net.tls.certificate = *v;
  if (auto v = a.option("--tls-key"))
    net.tls.key = *v;
  if (auto v = a.option("--tls-ca-file"))
    net.tls.ca_file = *v;
  if (auto v = a.option("--tls-ca-path"))
    net.tls.ca_path = *v;
  if (auto v = a.option("--tls-passphrase"))
    net.tls.passphrase = *v;
  if (auto problems = config::validate_tls(net.tls); !problems.empty())
    throw usage_error{problems.front()};
  return net;
}

std::unique_ptr<admin::client> client_of(const args& a) {
  auto net = network_of(a);
  try {
    return std::make_unique<admin::client>(net);
  } catch (const std::exception& e) {
    throw exit_with{exit_failed, e.what()};
  }
}

// The figures of one status JSON (absent fields read as 0 / "").
struct figures {
  std::string name, kind, readiness, health;
  std::vector<std::string> domains;
  int64_t local = 0, remote = 0, in_flight = 0, pools = 0, configured = 0;
  int64_t sessions = -1;
  double rate = -1;
};

figures read_figures(const std::string& text) {
  figures f;
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  if (doc.HasParseError() || !doc.IsObject())
    return f;
  auto str = [](const rapidjson::Value& o, const char* k) -> std::string {
    auto it = o.FindMember(k);
    return it != o.MemberEnd() && it->value.IsString() ? it->value.GetString()
                                                       : "";
  };
  auto num = [](const rapidjson::Value& o, const char* k) -> int64_t {
    auto it = o.FindMember(k);
    return it != o.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64()
                                                      : 0;
  };
  f.name = str(doc, "name");
  f.kind = str(doc, "kind");
  f.readiness = str(doc, "readiness");
  f.health = str(doc, "health");
  f.in_flight = num(doc, "in_flight");
  if (doc.HasMember("sessions"))
    f.sessions = num(doc, "sessions");
  if (auto it = doc.FindMember("slots");
      it != doc.MemberEnd() && it->value.IsObject()) {
    f.local = num(it->value, "local");
    f.remote = num(it->value, "remote");
  }
  if (auto it = doc.FindMember("throughput_1m");
      it != doc.MemberEnd() && it->value.IsNumber())
    f.rate = it->value.GetDouble();
  if (auto it = doc.FindMember("domains");
      it != doc.MemberEnd() && it->value.IsArray())
    for (auto& d : it->value.GetArray()) {
      if (!d.IsObject())
        continue;
      f.domains.push_back(str(d, "domain"));
      if (auto p = d.FindMember("remote_pools");
          p != d.MemberEnd() && p->value.IsObject()) {
        f.pools += num(p->value, "connected");
        if (auto c = p->value.FindMember("configured");
            c != p->value.MemberEnd() && c->value.IsArray())
          f.configured += c->value.Size();
      }
    }
  return f;
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

std::string rate_text(double rate) {
  if (rate < 0)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", rate);
  return buf;
}

int cluster_status(const args& a) {
  if (!a.positional().empty())
    throw usage_error{"unexpected argument '" + a.positional().front() + "'"};
  auto addresses = split_list(a.options("--nodes"));
  if (addresses.empty())
    throw usage_error{"cluster status needs --nodes HOST:PORT[,...]"};
  auto timeout
    = a.duration_option("--timeout").value_or(std::chrono::milliseconds{3000});
  auto client = client_of(a);
  auto answers = client->ask(addresses, false, timeout);
  bool all = true;
  for (auto& x : answers)
    all = all && x.reached;
  if (a.flag("--json")) {
    json_out out;
    out.begin_array();
    for (auto& x : answers) {
      out.begin_object();
      out.field("address", x.address);
      out.field("reachable", x.reached);
      if (x.reached) {
        out.key("status");
        out.value(json::parse(x.json));
      } else {
        out.field("error", x.error);
      }
      out.end_object();
    }
    out.end_array();
    out.print(std::cout);
  } else {
    std::vector<std::vector<std::string>> rows;
    std::string reasons;
    for (auto& x : answers) {
      if (!x.reached) {
        rows.push_back(
          {x.address, "-", "-", "UNREACHABLE", "-", "-", "-", "-", "-", "-"});
        reasons += x.address + ": " + x.error + "\n";
        continue;
      }
      auto f = read_figures(x.json);
      auto pools = f.kind == "node" ? std::to_string(f.sessions) + " worker(s)"
                                    : std::to_string(f.pools) + "/"
                                        + std::to_string(f.configured);
      rows.push_back({x.address, f.name, f.kind, f.readiness,
                      f.health.empty() ? "-" : f.health, join(f.domains),
                      std::to_string(f.local) + "+" + std::to_string(f.remote),
                      std::to_string(f.in_flight), rate_text(f.rate), pools});
    }
    print_table(std::cout,
                {"ADDRESS", "NAME", "KIND", "STATE", "HEALTH", "DOMAINS",
                 "SLOTS(L+R)", "IN-FLIGHT", "CMD/S(1m)", "POOLS"},
                rows);
    if (!reasons.empty())
      std::cout << "\nunreachable:\n" << reasons;
  }
  return all ? exit_ok : exit_incomplete;
}

int cluster_drain(const args& a) {
  if (!a.positional().empty())
    throw usage_error{"unexpected argument '" + a.positional().front() + "'"};
  auto address = a.option("--node");
  if (!address || address->empty())
    throw usage_error{"cluster drain needs --node HOST:PORT"};
  auto timeout
    = a.duration_option("--timeout").value_or(std::chrono::milliseconds{60000});
  auto per_request = std::min(timeout, std::chrono::milliseconds{3000});
  auto client = client_of(a);
  auto started = std::chrono::steady_clock::now();
  auto first = client->ask({*address}, true, per_request).front();
  bool json_output = a.flag("--json");
  auto report = [&](bool idle, const std::string& status) {
    auto seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count();
    if (json_output) {
      json_out out;
      out.begin_object();
      out.field("address", *address);
      out.field("idle", idle);
      out.field("seconds", std::round(seconds * 10) / 10);
      out.key("status");
      out.value(json::parse(status));
      out.end_object();
      out.print(std::cout);
    } else if (idle) {
      std::cout << *address << ": idle after " << rate_text(seconds)
                << " s (drained; it takes no new work until restarted)\n";
    } else {
      auto f = read_figures(status);
      std::cout << *address << ": not idle after " << rate_text(seconds)
                << " s (" << f.readiness << ", " << f.in_flight
                << " in flight)\n";
    }
  };
  if (!first.reached) {
    if (first.unsupported)
      throw exit_with{exit_failed, *address + ": " + first.error};
    throw exit_with{exit_incomplete,
                    *address + ": unreachable (" + first.error + ")"};
  }
  auto status = first.json;
  if (!json_output)
    std::cout << *address << ": draining (" << read_figures(status).in_flight
              << " in flight)\n"
              << std::flush;
  auto deadline = started + timeout;
  while (true) {
    auto f = read_figures(status);
    if (f.readiness == "drained" && f.in_flight == 0) {
      report(true, status);
      return exit_ok;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      report(false, status);
      return exit_timeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{500});
    auto next = client->ask({*address}, false, per_request).front();
    if (next.reached)
      status = next.json;
  }
}

} // namespace

int run_cluster(const std::vector<std::string>& argv) {
  return run_subcommand("cluster", argv, cluster_command,
                        {{"status", &status_command, cluster_status},
                         {"drain", &drain_command, cluster_drain}});
}

} // namespace cmdbus::cli
