#include "cmdbus/db/retention.hpp"

#include <stdexcept>

#include "cmdbus/db/connection.hpp"

namespace cmdbus {

prune_counts& prune_counts::operator+=(const prune_counts& x) noexcept {
  commands += x.commands;
  command_audits += x.command_audits;
  processes += x.processes;
  process_audits += x.process_audits;
  batches += x.batches;
  batch_audits += x.batch_audits;
  archived_messages += x.archived_messages;
  api_requests += x.api_requests;
  partitions_created += x.partitions_created;
  partitions_dropped += x.partitions_dropped;
  partitions_kept += x.partitions_kept;
  return *this;
}

int64_t prune_counts::total() const noexcept {
  return commands + command_audits + processes + process_audits + batches
         + batch_audits + archived_messages + api_requests;
}

namespace db {

namespace {

// An age as the SQL functions take it: milliseconds, turned into an
// interval by the statement.
std::optional<int64_t>
ms_of(const std::optional<std::chrono::milliseconds>& x) {
  if (!x)
    return std::nullopt;
  return static_cast<int64_t>(x->count());
}

constexpr const char* age_sql = "($2::bigint * interval '1 millisecond')";

// One chunk of `function` (a commandbus.cmdbus_prune_* function of one
// target (a domain, NULL for all; a queue), an age and a chunk size): its
// result row.
result prune_chunk(connection& conn, const char* function,
                   const std::optional<std::string>& target,
                   const std::optional<std::chrono::milliseconds>& age,
                   int chunk_size) {
  return conn.query(std::string{"SELECT * FROM commandbus."} + function
                      + "($1, " + age_sql + ", $3)",
                    target, ms_of(age), chunk_size);
}

// The queues that `function` (a set-returning commandbus function of a
// domain, NULL for all) names.
std::vector<std::string> queues_of(connection& conn, const char* function,
                                   const std::optional<std::string>& domain) {
  auto r = conn.query(
    std::string{"SELECT q FROM commandbus."} + function + "($1) q", domain);
  std::vector<std::string> names;
  for (int i = 0; i < r.rows(); ++i)
    names.emplace_back(r.text(i, 0));
  return names;
}

} // namespace

prune_pass::prune_pass(std::vector<std::string> domains, retention_ages ages,
                       int chunk_size)
  : ages_(ages), chunk_size_(chunk_size) {
  if (chunk_size < 1)
    throw std::invalid_argument("a prune's chunk size must be at least 1");
  if (domains.empty())
    domains_.emplace_back(std::nullopt);
  for (auto& d : domains)
    domains_.emplace_back(std::move(d));
  settle();
}

void prune_pass::restart() noexcept {
  domain_ = 0;
  stage_ = stage::commands;
  queues_.reset();
  queue_ = 0;
  settle();
}

bool prune_pass::done() const noexcept {
  return domain_ >= domains_.size();
}

void prune_pass::settle() noexcept {
  while (domain_ < domains_.size()) {
    switch (stage_) {
      case stage::commands:
        if (ages_.commands)
          return;
        stage_ = stage::processes;
        break;
      case stage::processes:
        if (ages_.processes)
          return;
        stage_ = stage::batches;
        break;
      case stage::batches:
        if (ages_.batches)
          return;
        stage_ = stage::partitions;
        break;
      case stage::partitions:
        if (!queues_ || queue_ < queues_->size())
          return;
        stage_ = stage::archive;
        queues_.reset();
        queue_ = 0;
        break;
      case stage::archive:
        if (ages_.archive && (!queues_ || queue_ < queues_->size()))
          return;
        stage_ = stage::next_domain;
        break;
      case stage::next_domain:
        ++domain_;
        stage_ = stage::commands;
        queues_.reset();
        queue_ = 0;
        break;
    }
  }
}

std::string prune_pass::position() const {
  if (done())
    return "done";
  auto of = domains_[domain_] ? "domain " + *domains_[domain_]
                              : std::string{"every domain"};
  switch (stage_) {
    case stage::commands: return "commands of " + of;
    case stage::processes: return "processes of " + of;
    case stage::batches: return "batches of " + of;
    case stage::partitions:
      if (queues_ && queue_ < queues_->size())
        return "partitions of queue " + (*queues_)[queue_];
      return "partitioned queues of " + of;
    case stage::archive:
      if (queues_ && queue_ < queues_->size())
        return "archive of queue " + (*queues_)[queue_];
      return "archives of " + of;
    case stage::next_domain: break;
  }
  return "done";
}

prune_counts prune_pass::step(connection& conn) {
  prune_counts out;
  if (done())
    return out;
  const auto& domain = domains_[domain_];
  int64_t removed = 0;
  switch (stage_) {
    case stage::commands: {
      auto r = prune_chunk(conn, "cmdbus_prune_commands", domain,
                           ages_.commands, chunk_size_);
      out.commands = removed = r.int64(0, 0);
      out.command_audits = r.int64(0, 1);
      out.api_requests = r.int64(0, 2);
      break;
    }
    case stage::processes: {
      auto r = prune_chunk(conn, "cmdbus_prune_processes", domain,
                           ages_.processes, chunk_size_);
      out.processes = removed = r.int64(0, 0);
      out.process_audits = r.int64(0, 1);
      break;
    }
    case stage::batches: {
      auto r = prune_chunk(conn, "cmdbus_prune_batches", domain, ages_.batches,
                           chunk_size_);
      out.batches = removed = r.int64(0, 0);
      out.batch_audits = r.int64(0, 1);
      break;
    }
    case stage::partitions: {
      if (!queues_) {
        // Usually none: then the next stage's chunk runs in this one.
        queues_ = queues_of(conn, "cmdbus_partitioned_queues", domain);
        queue_ = 0;
        settle();
        return queues_ && !queues_->empty() ? out : step(conn);
      }
      auto r = conn.query("SELECT created, dropped, kept FROM "
                          "commandbus.cmdbus_partition_maintenance($1)",
                          (*queues_)[queue_]);
      out.partitions_created = r.int64(0, 0);
      out.partitions_dropped = r.int64(0, 1);
      out.partitions_kept = r.int64(0, 2);
      ++queue_;
      settle();
      return out;
    }
    case stage::archive: {
      if (!queues_) {
        queues_ = queues_of(conn, "cmdbus_prune_queues", domain);
        queue_ = 0;
        settle();
        return out;
      }
      auto r = prune_chunk(conn, "cmdbus_prune_archive", (*queues_)[queue_],
                           ages_.archive, chunk_size_);
      out.archived_messages = removed = r.int64(0, 0);
      if (removed < chunk_size_) {
        ++queue_;
        settle();
      }
      return out;
    }
    case stage::next_domain: break;
  }
  if (removed < chunk_size_) {
    stage_ = static_cast<stage>(static_cast<int>(stage_) + 1);
    settle();
  }
  return out;
}

prune_counts preview_prune(connection& conn,
                           const std::vector<std::string>& domains,
                           const retention_ages& ages) {
  std::vector<std::optional<std::string>> targets;
  if (domains.empty())
    targets.emplace_back(std::nullopt);
  for (auto& d : domains)
    targets.emplace_back(d);
  auto interval = [](const std::optional<std::chrono::milliseconds>& x) {
    return ms_of(x);
  };
  prune_counts out;
  for (auto& d : targets) {
    auto r = conn.query(
      "SELECT kind, n FROM commandbus.cmdbus_prune_preview($1, "
      "$2::bigint * interval '1 millisecond', "
      "$3::bigint * interval '1 millisecond', "
      "$4::bigint * interval '1 millisecond', "
      "$5::bigint * interval '1 millisecond')",
      d, interval(ages.commands), interval(ages.processes),
      interval(ages.batches), interval(ages.archive));
    for (int i = 0; i < r.rows(); ++i) {
      std::string kind{r.text(i, 0)};
      auto n = r.int64(i, 1);
      if (kind == "commands")
        out.commands += n;
      else if (kind == "command_audits")
        out.command_audits += n;
      else if (kind == "processes")
        out.processes += n;
      else if (kind == "process_audits")
        out.process_audits += n;
      else if (kind == "batches")
        out.batches += n;
      else if (kind == "batch_audits")
        out.batch_audits += n;
      else if (kind == "archived_messages")
        out.archived_messages += n;
      else if (kind == "api_requests")
        out.api_requests += n;
    }
  }
  return out;
}

} // namespace db
} // namespace cmdbus
