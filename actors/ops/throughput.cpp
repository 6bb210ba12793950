#include "cmdbus/actors/ops/throughput.hpp"

namespace cmdbus {

void throughput_window::add(clock::time_point at, std::vector<int64_t> counts) {
  samples_.push_back({at, std::move(counts)});
  // Keeps the oldest sample at least `span` before the newest, so that the
  // window covers the whole span once sampling ran that long.
  while (samples_.size() > 2 && at - samples_[1].at >= span_)
    samples_.pop_front();
}

std::optional<double> throughput_window::rate(size_t i) const {
  if (samples_.size() < 2)
    return std::nullopt;
  auto& first = samples_.front();
  auto& last = samples_.back();
  if (i >= first.counts.size() || i >= last.counts.size())
    return std::nullopt;
  auto secs = std::chrono::duration<double>(last.at - first.at).count();
  if (secs <= 0)
    return std::nullopt;
  return static_cast<double>(last.counts[i] - first.counts[i]) / secs;
}

std::vector<std::optional<double>> throughput_window::rates() const {
  std::vector<std::optional<double>> out;
  if (samples_.empty())
    return out;
  for (size_t i = 0; i < samples_.back().counts.size(); ++i)
    out.push_back(rate(i));
  return out;
}

throughput_sampler::throughput_sampler(read_fn read,
                                       std::chrono::milliseconds every)
  : read_(std::move(read)), every_(every) {
  window_.add(throughput_window::clock::now(), read_());
  thread_ = std::thread{[this] { run(); }};
}

throughput_sampler::~throughput_sampler() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<std::optional<double>> throughput_sampler::rates() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return window_.rates();
}

void throughput_sampler::run() {
  std::unique_lock<std::mutex> lock{mtx_};
  auto next = throughput_window::clock::now() + every_;
  while (!cv_.wait_until(lock, next, [this] { return stopping_; })) {
    // The counts are read outside the lock: readers of the rates never wait
    // for them.
    lock.unlock();
    auto counts = read_();
    auto now = throughput_window::clock::now();
    lock.lock();
    window_.add(now, std::move(counts));
    next += every_;
    if (next < now)
      next = now + every_;
  }
}

} // namespace cmdbus
