#include "bench/chaos/health_watch.hpp"

#include <httplib.h>
#include <rapidjson/document.h>

namespace cmdbus::chaos {

using namespace std::chrono_literals;

std::string health_status_of(const std::string& body) {
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("status")
      || !doc["status"].IsString())
    return "unreadable";
  std::string status = doc["status"].GetString();
  if (status != "DEGRADED" || !doc.HasMember("domains")
      || !doc["domains"].IsArray())
    return status;
  // The load mixes failing commands in: a streak of them is the load, not
  // a fault.
  static const std::string streak = " consecutive handler failures";
  for (auto& d : doc["domains"].GetArray()) {
    if (!d.IsObject() || !d.HasMember("reasons") || !d["reasons"].IsArray())
      return status;
    for (auto& r : d["reasons"].GetArray()) {
      std::string reason = r.IsString() ? r.GetString() : "";
      if (reason.size() < streak.size()
          || reason.compare(reason.size() - streak.size(), streak.size(),
                            streak)
               != 0)
        return status;
    }
  }
  return "HEALTHY";
}

health_watch::health_watch(std::vector<int> ports)
  : ports_(std::move(ports)), changes_(ports_.size()) {
  // nop
}

health_watch::~health_watch() {
  stop();
}

void health_watch::start() {
  thread_ = std::thread([this] { run(); });
}

void health_watch::stop() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
}

void health_watch::run() {
  while (!stop_) {
    for (size_t i = 0; i < ports_.size(); ++i) {
      httplib::Client client{"127.0.0.1", ports_[i]};
      client.set_connection_timeout(1s);
      client.set_read_timeout(1s);
      auto res = client.Get("/healthz");
      auto state = res ? health_status_of(res->body) : "unreachable";
      std::lock_guard<std::mutex> guard{mtx_};
      auto& c = changes_[i];
      if (c.empty() || c.back().state != state)
        c.push_back({clock::now(), state});
    }
    pause_for(100ms);
  }
}

bool health_watch::unwell_between(clock::time_point from,
                                  clock::time_point to) const {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& cs : changes_)
    for (size_t k = 0; k < cs.size(); ++k) {
      auto unwell = cs[k].state == "DEGRADED" || cs[k].state == "CRITICAL";
      // The answer held from its change until the next one.
      auto until = k + 1 < cs.size() ? cs[k + 1].at : clock::now();
      if (unwell && cs[k].at <= to && until >= from)
        return true;
    }
  return false;
}

std::vector<std::string> health_watch::latest() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<std::string> out;
  for (auto& cs : changes_)
    out.push_back(cs.empty() ? "unknown" : cs.back().state);
  return out;
}

bool health_watch::wait_all_healthy(clock::time_point deadline) const {
  for (;;) {
    auto states = latest();
    bool all = true;
    for (auto& s : states)
      all = all && s == "HEALTHY";
    if (all)
      return true;
    if (clock::now() >= deadline)
      return false;
    pause_for(100ms);
  }
}

std::vector<health_watch::change> health_watch::changes(size_t i) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return changes_.at(i);
}

} // namespace cmdbus::chaos
