#include "cmdbus/actors/ops/admin_view.hpp"

#include <cctype>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/version.hpp"

namespace cmdbus::admin {

namespace {

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(json_writer& w, const std::string& s) {
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
}

void write_rate(json_writer& w, const std::optional<double>& rate) {
  if (rate && *rate >= 0)
    w.Double(*rate);
  else
    w.Null();
}

// "HEALTHY" -> "healthy" (the admin JSON's spelling).
std::string lowercase(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

view view_of(const status_snapshot& s) {
  view v;
  v.readiness = s.readiness;
  v.health = lowercase(to_string(s.state));
  double total = 0;
  bool known = !s.domains.empty();
  for (auto& d : s.domains) {
    domain_view dv;
    dv.domain = d.health.domain;
    dv.health = lowercase(to_string(d.health.state));
    dv.local_slots = d.slots;
    dv.remote_slots = d.remote_slots;
    dv.in_flight = d.in_flight;
    dv.finished = d.finished;
    dv.throughput_1m = d.finished_per_second;
    dv.remote_pools_connected = d.remote_pools;
    dv.remote_pools = d.configured_pools;
    v.in_flight += d.in_flight;
    v.finished += d.finished;
    if (d.finished_per_second)
      total += *d.finished_per_second;
    else
      known = false;
    v.domains.push_back(std::move(dv));
  }
  if (known)
    v.throughput_1m = total;
  return v;
}

std::string status_json(const source& src, const view& v) {
  rapidjson::StringBuffer buf;
  json_writer w{buf};
  w.StartObject();
  w.Key("protocol");
  w.Int(protocol_version);
  w.Key("name");
  write_string(w, src.name ? src.name() : std::string{});
  w.Key("kind");
  write_string(w, src.kind);
  w.Key("version");
  write_string(w, version());
  w.Key("readiness");
  write_string(w, v.readiness);
  w.Key("health");
  if (v.health.empty())
    w.Null();
  else
    write_string(w, v.health);
  int64_t local = 0;
  int64_t remote = 0;
  for (auto& d : v.domains) {
    local += d.local_slots;
    remote += d.remote_slots;
  }
  w.Key("slots");
  w.StartObject();
  w.Key("local");
  w.Int64(local);
  w.Key("remote");
  w.Int64(remote);
  w.EndObject();
  w.Key("in_flight");
  w.Int64(v.in_flight);
  w.Key("throughput_1m");
  write_rate(w, v.throughput_1m);
  if (v.sessions >= 0) {
    w.Key("sessions");
    w.Int64(v.sessions);
  }
  w.Key("domains");
  w.StartArray();
  for (auto& d : v.domains) {
    w.StartObject();
    w.Key("domain");
    write_string(w, d.domain);
    w.Key("health");
    if (d.health.empty())
      w.Null();
    else
      write_string(w, d.health);
    w.Key("slots");
    w.StartObject();
    w.Key("local");
    w.Int64(d.local_slots);
    w.Key("remote");
    w.Int64(d.remote_slots);
    w.EndObject();
    w.Key("in_flight");
    w.Int64(d.in_flight);
    w.Key("throughput_1m");
    write_rate(w, d.throughput_1m);
    w.Key("remote_pools");
    w.StartObject();
    w.Key("connected");
    w.Int64(d.remote_pools_connected);
    w.Key("configured");
    w.StartArray();
    for (auto& p : d.remote_pools)
      write_string(w, p);
    w.EndArray();
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

} // namespace cmdbus::admin
