// Bulk sends of the command bus: `send_batch` splits its input into chunks,
// each one transaction (db/send_chunk.hpp), sent one after the other or on
// several pooled connections at once.

#include <algorithm>
#include <atomic>
#include <future>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/send_chunk.hpp"

namespace cmdbus {

std::vector<send_result>
command_bus::send_chunk(const std::vector<db::prepared_command>& items,
                        db::connection& conn, bool own_transaction) {
  auto find = [this](const std::string& domain, const std::vector<uuid>& ids,
                     db::connection* lookup) {
    return first_existing(domain, ids, lookup);
  };
  return db::send_chunk(items, conn, own_transaction, opts_.copy_threshold,
                        find);
}

std::vector<std::pair<size_t, size_t>>
command_bus::plan_chunks(const std::vector<send_request>& reqs) {
  // Everything is validated, and the queues exist, before the first chunk
  // goes out, so that invalid input writes nothing. Encoding happens per
  // chunk (prepare_range), on the thread that sends it.
  db::check_unique(reqs.size(), [&](size_t i) {
    return std::make_pair(&reqs[i].domain, reqs[i].command_id);
  });
  std::set<std::string> queues;
  for (auto& r : reqs)
    queues.insert(db::validated_queue(r));
  for (auto& r : reqs)
    if (r.reply_to)
      queues.insert(*r.reply_to);
  for (auto& q : queues)
    ensure_queue(q);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t start = 0; start < reqs.size(); start += opts_.chunk_size)
    ranges.emplace_back(start, std::min(reqs.size(), start + opts_.chunk_size));
  return ranges;
}

std::vector<db::prepared_command>
command_bus::prepare_range(const std::vector<send_request>& reqs,
                           std::pair<size_t, size_t> range) const {
  std::vector<db::prepared_command> items;
  items.reserve(range.second - range.first);
  for (auto i = range.first; i < range.second; ++i)
    items.push_back(prepare(reqs[i]));
  return items;
}

batch_send_result
command_bus::send_batch(const std::vector<send_request>& reqs) {
  auto chunks = plan_chunks(reqs);
  batch_send_result out;
  std::vector<std::vector<send_result>> results(chunks.size());
  // Up to parallel_chunks connections send chunks concurrently; each takes
  // the next chunk as soon as its previous one committed (no waves). After
  // a failure no further chunk starts; those already running finish.
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mtx;
  std::exception_ptr failure;
  auto lane = [&] {
    for (;;) {
      if (failed)
        return;
      auto c = next++;
      if (c >= chunks.size())
        return;
      try {
        auto items = prepare_range(reqs, chunks[c]);
        auto conn = pool_.acquire();
        results[c] = send_chunk(items, *conn, true);
      } catch (...) {
        std::lock_guard<std::mutex> guard{failure_mtx};
        if (!failure)
          failure = std::current_exception();
        failed = true;
        return;
      }
    }
  };
  auto width = std::min(chunks.size(),
                        std::max<size_t>(1, opts_.parallel_chunks));
  std::vector<std::future<void>> others;
  for (size_t k = 1; k < width; ++k)
    others.push_back(std::async(std::launch::async, lane));
  // The caller's thread is the first lane.
  lane();
  for (auto& f : others)
    f.get();
  if (failure)
    std::rethrow_exception(failure);
  for (auto& r : results) {
    out.results.insert(out.results.end(), r.begin(), r.end());
    ++out.chunks_processed;
  }
  out.total_commands = static_cast<int>(out.results.size());
  return out;
}

batch_send_result command_bus::send_batch(const std::vector<send_request>& reqs,
                                          db::connection& conn) {
  batch_send_result out;
  for (auto& range : plan_chunks(reqs)) {
    auto results = send_chunk(prepare_range(reqs, range), conn, false);
    out.results.insert(out.results.end(), results.begin(), results.end());
    ++out.chunks_processed;
  }
  out.total_commands = static_cast<int>(out.results.size());
  return out;
}

} // namespace cmdbus
