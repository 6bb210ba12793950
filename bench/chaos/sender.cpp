#include "bench/chaos/sender.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "bench/chaos/process.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/types.hpp"

namespace cmdbus::chaos {

using namespace std::chrono_literals;

namespace {

std::atomic<bool> abandoned_flag{false};

// The sending thread's entry of state::send_started.
thread_local std::atomic<int64_t>* attempt_started = nullptr;

int64_t now_ns() {
  return clock::now().time_since_epoch().count();
}

} // namespace

// Everything the sending threads touch, owned jointly by them and the
// sender, so that abandoned threads never use freed memory.
struct sender::state {
  std::shared_ptr<load_plan> plan;
  std::string dsn;
  std::chrono::milliseconds duration;
  std::chrono::milliseconds give_up_after;
  int threads = 1;
  /// Commands planned before each unit (its place in the schedule).
  std::vector<size_t> before;
  std::atomic<size_t> next{0};
  std::atomic<int> finished{0};
  std::atomic<int> in_send{0};
  /// Per thread: when its current send attempt started (steady clock
  /// ticks), 0 between attempts.
  std::unique_ptr<std::atomic<int64_t>[]> send_started;
  std::atomic<bool> stop{false};
  std::unique_ptr<db::pool> pool;
  std::unique_ptr<command_bus> bus;
  mutable std::mutex mtx;
  send_stats stats;
  std::exception_ptr failure;

  // Sleeps until `t` in short slices; false when told to stop meanwhile.
  bool pace_until(clock::time_point t) const {
    while (clock::now() < t) {
      if (stop || interrupted())
        return false;
      std::this_thread::sleep_for(
        std::min<clock::duration>(t - clock::now(), 20ms));
    }
    return !stop && !interrupted();
  }

  // Sends until it knows the unit went through: acknowledged, or found to
  // exist when a retry follows a failure (a send whose commit succeeded
  // but whose answer was lost), or refused as a duplicate (same meaning).
  template <class Send, class Exists>
  bool send_with_retry(Send&& send, Exists&& exists) {
    auto give_up = clock::now() + give_up_after;
    bool failed_before = false;
    for (;;) {
      try {
        *attempt_started = now_ns();
        if (failed_before && exists()) {
          *attempt_started = 0;
          std::lock_guard<std::mutex> guard{mtx};
          ++stats.found_on_retry;
          return true;
        }
        send();
        *attempt_started = 0;
        return true;
      } catch (const duplicate_command_error&) {
        *attempt_started = 0;
        std::lock_guard<std::mutex> guard{mtx};
        ++stats.found_on_retry;
        return true;
      } catch (const db::invalid_argument&) {
        throw; // a bad plan, not a fault
      } catch (const std::exception& e) {
        *attempt_started = 0;
        std::lock_guard<std::mutex> guard{mtx};
        ++stats.failed_attempts;
        stats.last_error = e.what();
      }
      failed_before = true;
      if (clock::now() >= give_up || !pace_until(clock::now() + 200ms)) {
        std::lock_guard<std::mutex> guard{mtx};
        ++stats.given_up;
        return false;
      }
    }
  }

  void send_command(size_t index) {
    auto& c = plan->commands[index];
    send_request req;
    req.domain = plan->domain;
    req.command_type = "Test";
    req.command_id = c.id;
    req.data = command_data(*plan, index);
    if (c.reply)
      req.reply_to = plan->reply_queue;
    req.max_attempts = max_attempts;
    if (c.delay.count() > 0)
      req.not_before = not_before_in(c.delay);
    c.confirmed = send_with_retry(
      [&] { bus->send(req); },
      [&] { return bus->command_exists(plan->domain, c.id); });
    if (c.confirmed) {
      std::lock_guard<std::mutex> guard{mtx};
      ++stats.commands_confirmed;
    }
  }

  void send_batch(size_t index) {
    auto& b = plan->batches[index];
    std::vector<batch_command> cmds;
    for (auto i : b.members) {
      auto& c = plan->commands[i];
      batch_command bc;
      bc.command_type = "Test";
      bc.command_id = c.id;
      bc.data = command_data(*plan, i);
      if (c.reply)
        bc.reply_to = plan->reply_queue;
      bc.max_attempts = max_attempts;
      if (c.delay.count() > 0)
        bc.not_before = not_before_in(c.delay);
      cmds.push_back(std::move(bc));
    }
    create_batch_options opts;
    opts.batch_id = b.id;
    opts.name = "chaos batch " + std::to_string(index);
    // A batch is one transaction: it exists with all its commands or not
    // at all.
    b.confirmed = send_with_retry(
      [&] { bus->create_batch(plan->domain, cmds, opts); },
      [&] { return bus->get_batch(plan->domain, b.id).has_value(); });
    if (b.confirmed) {
      for (auto i : b.members)
        plan->commands[i].confirmed = true;
      std::lock_guard<std::mutex> guard{mtx};
      ++stats.batches_confirmed;
      stats.commands_confirmed += static_cast<int64_t>(b.members.size());
    }
  }
};

sender::sender(std::shared_ptr<load_plan> plan, std::string dsn,
               std::chrono::milliseconds duration,
               std::chrono::milliseconds give_up_after, int threads)
  : st_(std::make_shared<state>()) {
  st_->plan = std::move(plan);
  st_->dsn = std::move(dsn);
  st_->duration = duration;
  st_->give_up_after = give_up_after;
  st_->threads = std::max(1, threads);
  st_->send_started = std::make_unique<std::atomic<int64_t>[]>(
    static_cast<size_t>(st_->threads));
  for (int i = 0; i < st_->threads; ++i)
    st_->send_started[i] = 0;
  size_t n = 0;
  for (auto& u : st_->plan->units) {
    st_->before.push_back(n);
    n += u.is_batch ? st_->plan->batches[u.index].members.size() : 1;
  }
}

sender::~sender() {
  st_->stop = true;
  try {
    finish_within(10s);
  } catch (const std::exception&) {
    // Reported by the caller's own finish_within, if it asked.
  }
}

void sender::start() {
  db::pool_options popts;
  popts.dsn = st_->dsn;
  popts.max_size = static_cast<size_t>(st_->threads);
  popts.connection.application_name = "cmdbus-chaos-sender";
  popts.connection.connect_timeout = 5s;
  popts.acquire_timeout = 5000ms;
  popts.backoff_max = 1000ms;
  st_->pool = std::make_unique<db::pool>(popts);
  st_->bus = std::make_unique<command_bus>(*st_->pool);
  auto start = clock::now();
  for (int i = 0; i < st_->threads; ++i)
    threads_.emplace_back([st = st_, i, start] {
      try {
        run(st, static_cast<size_t>(i), start);
      } catch (...) {
        st->stop = true;
        std::lock_guard<std::mutex> guard{st->mtx};
        if (!st->failure)
          st->failure = std::current_exception();
      }
      st->send_started[i] = 0;
      ++st->finished;
    });
}

bool sender::done() const noexcept {
  return st_->finished.load() == static_cast<int>(threads_.size());
}

bool sender::done_or_hung(std::chrono::milliseconds hung_after) const noexcept {
  auto now = now_ns();
  auto limit = std::chrono::duration_cast<clock::duration>(hung_after).count();
  int hung = 0;
  for (int i = 0; i < st_->threads; ++i) {
    auto started = st_->send_started[i].load();
    hung += started != 0 && now - started > limit;
  }
  return st_->finished.load() + hung == static_cast<int>(threads_.size());
}

bool sender::finish_within(std::chrono::milliseconds timeout) {
  auto until = clock::now() + timeout;
  while (!done() && clock::now() < until)
    std::this_thread::sleep_for(10ms);
  if (!done()) {
    abandon();
    return false;
  }
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  std::lock_guard<std::mutex> guard{st_->mtx};
  if (st_->failure) {
    auto failure = st_->failure;
    st_->failure = nullptr;
    std::rethrow_exception(failure);
  }
  return true;
}

void sender::abandon() {
  st_->stop = true;
  {
    std::lock_guard<std::mutex> guard{st_->mtx};
    st_->stats.hung = st_->in_send.load();
  }
  for (auto& t : threads_)
    if (t.joinable())
      t.detach();
  abandoned_flag = true;
}

send_stats sender::stats() const {
  std::lock_guard<std::mutex> guard{st_->mtx};
  return st_->stats;
}

bool sender::any_abandoned() noexcept {
  return abandoned_flag.load();
}

void sender::run(const std::shared_ptr<state>& st, size_t thread,
                 clock::time_point start) {
  attempt_started = &st->send_started[thread];
  auto& units = st->plan->units;
  auto total = static_cast<double>(
    std::max<size_t>(1, st->plan->commands.size()));
  for (;;) {
    auto i = st->next++;
    if (i >= units.size())
      return;
    auto due = start
               + std::chrono::duration_cast<clock::duration>(
                 st->duration * (static_cast<double>(st->before[i]) / total));
    if (!st->pace_until(due))
      return;
    ++st->in_send;
    if (units[i].is_batch)
      st->send_batch(units[i].index);
    else
      st->send_command(units[i].index);
    --st->in_send;
  }
}

} // namespace cmdbus::chaos
