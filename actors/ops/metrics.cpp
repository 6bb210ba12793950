#include "cmdbus/actors/ops/metrics.hpp"

#include <algorithm>

namespace cmdbus {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

} // namespace

void duration_histogram::observe(std::chrono::nanoseconds d) noexcept {
  auto ns = std::max<int64_t>(d.count(), 0);
  auto secs = static_cast<double>(ns) / 1e9;
  auto it = std::lower_bound(duration_buckets.begin(), duration_buckets.end(),
                             secs);
  counts_[static_cast<size_t>(it - duration_buckets.begin())].fetch_add(
    1, relaxed);
  sum_ns_.fetch_add(ns, relaxed);
}

duration_histogram::snapshot duration_histogram::read() const noexcept {
  snapshot s;
  int64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    total += counts_[i].load(relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum_seconds = static_cast<double>(sum_ns_.load(relaxed)) / 1e9;
  return s;
}

const char* to_string(db_actor a) noexcept {
  switch (a) {
    case db_actor::poller: return "poller";
    case db_actor::completion: return "completion";
    default: return "retry_scheduler";
  }
}

domain_metrics::domain_metrics(std::string domain, int64_t slots,
                               const std::vector<std::string>& registered_types)
  : domain_(std::move(domain)), slots_(slots) {
  for (auto& t : registered_types)
    registered_.emplace(t, std::make_unique<type_metrics>());
}

type_metrics& domain_metrics::of(std::string_view command_type) {
  if (auto i = registered_.find(command_type); i != registered_.end())
    return *i->second;
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = others_.find(command_type);
  if (i != others_.end())
    return *i->second;
  std::string name{command_type};
  if (others_.size() >= max_unregistered_types)
    name = "other";
  auto& slot = others_[name];
  if (!slot)
    slot = std::make_unique<type_metrics>();
  return *slot;
}

int64_t domain_metrics::all_db_errors() const noexcept {
  int64_t n = other_db_errors.load(relaxed);
  for (auto& e : db_errors_)
    n += e.load(relaxed);
  return n;
}

outcome_totals domain_metrics::totals() const {
  outcome_totals t;
  for_each_type([&t](const std::string&, const type_metrics& m) {
    t.completed += m.completed.load(relaxed);
    t.failed += m.failed.load(relaxed);
    t.retried += m.retried.load(relaxed);
    t.moved_to_tsq += m.moved_to_tsq.load(relaxed);
  });
  return t;
}

int64_t domain_metrics::finished() const {
  return totals().finished();
}

} // namespace cmdbus
