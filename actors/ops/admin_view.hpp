#pragma once

// What the admin actor of a worker or a handler node answers (`cmdbus
// cluster status`): the view of its process and its JSON document. A
// worker's view is a rendering of its status view (status_snapshot.hpp),
// the one its HTTP endpoint renders too. Plain C++ (no CAF).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cmdbus/actors/ops/status_snapshot.hpp"

namespace cmdbus::admin {

/// The version of the admin requests and of their JSON answer.
inline constexpr int32_t protocol_version = 1;

/// One domain of a worker or node, at one moment.
struct domain_view {
  std::string domain;
  /// "healthy", "degraded" or "critical" ("" when not known: a node).
  std::string health;
  int64_t local_slots = 0;
  int64_t remote_slots = 0;
  int64_t in_flight = 0;
  /// Commands finished so far (outcome_totals::finished); -1: not counted
  /// per domain (a node counts over all its domains).
  int64_t finished = -1;
  /// Commands finished per second over the last minute; unset when not
  /// known (yet, or not counted per domain).
  std::optional<double> throughput_1m;
  /// Remote pools connected now, and the configured addresses.
  int64_t remote_pools_connected = 0;
  std::vector<std::string> remote_pools;
};

/// A worker or node, at one moment.
struct view {
  /// "ready", "starting", "draining", "drained" or "stopped".
  std::string readiness;
  /// The worst domain health ("" when not known).
  std::string health;
  int64_t in_flight = 0;
  /// A worker: commands finished so far over all domains
  /// (outcome_totals::finished). A node: commands its handlers ran (it
  /// cannot tell a final outcome from one its worker retries).
  int64_t finished = 0;
  /// `finished` per second over the last minute; unset when not known yet.
  std::optional<double> throughput_1m;
  /// A node: its connected worker sessions; -1 for a worker.
  int64_t sessions = -1;
  std::vector<domain_view> domains;
};

/// What the admin actor reads from its process. Every function is called
/// from the admin's own threads and must be thread-safe.
struct source {
  /// "worker" or "node".
  std::string kind;
  /// The process's name (a node's name; a worker's host/pid).
  std::function<std::string()> name;
  std::function<view()> read;
  /// Starts a drain (returns at once; repeated calls do nothing more);
  /// empty: drain is refused (ec::unsupported).
  std::function<void()> drain;
};

/// A worker's view: its status view as the admin actor shows it (health in
/// lower case; the worker's throughput is the sum of its domains', known
/// when every domain's is).
view view_of(const status_snapshot& s);

/// The status JSON of `v` (see docs/cli.md, "cmdbus cluster"): the
/// throughput over the last minute per domain and in total is null when
/// unknown.
std::string status_json(const source& src, const view& v);

} // namespace cmdbus::admin
