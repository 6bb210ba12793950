#pragma once

// The application's API of process managers: start a process of a
// registered workflow (alone, or inside the caller's transaction), and read
// processes and their audit trails. A worker with the same registry drives
// the processes on (actors/worker.hpp); docs/processes.md explains the
// whole model.

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmdbus/db/pool.hpp"
#include "cmdbus/process/registry.hpp"
#include "cmdbus/process/store.hpp"

namespace cmdbus {

/// Raised by process_manager::start for a process type that has no
/// registered workflow in the domain.
class unknown_process_type_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

class process_manager {
public:
  /// Uses connections of `pool` and the workflows of `registry`.
  process_manager(db::pool& pool,
                  std::shared_ptr<const process_registry> registry,
                  process_store_options opts = {});

  /// Starts a process of `process_type` in `domain` in one transaction: the
  /// process row and its first command (correlation_id = the process id,
  /// reply_to = the type's reply queue, by default the domain's shared
  /// process reply queue; created the first time).
  /// With `batch_id` it joins that PROCESS batch. Returns the process id.
  /// Throws unknown_process_type_error, what the workflow throws for bad
  /// input, and what process_store::start throws.
  uuid start(const std::string& domain, const std::string& process_type,
             const json& input,
             const std::optional<uuid>& batch_id = std::nullopt);

  /// The same on `conn`, inside the caller's open transaction: the process
  /// exists (and its first command is sent) only if the caller commits.
  uuid start(db::connection& conn, const std::string& domain,
             const std::string& process_type, const json& input,
             const std::optional<uuid>& batch_id = std::nullopt);

  std::optional<process_metadata> get(const std::string& domain,
                                      const uuid& process_id);

  /// Newest first.
  std::vector<process_metadata> list(const std::string& domain,
                                     const process_query& q = {});

  /// Ordered by sent_at.
  std::vector<process_audit_entry> audit_trail(const std::string& domain,
                                               const uuid& process_id);

  /// Creates a PROCESS batch of `total_count` processes (see
  /// process_store::create_batch).
  uuid create_batch(const std::string& domain, int total_count,
                    const std::optional<std::string>& name = std::nullopt,
                    const std::optional<uuid>& batch_id = std::nullopt);

private:
  const workflow& workflow_of(const std::string& domain,
                              const std::string& process_type) const;
  void ensure_reply_queue(db::connection& conn, const std::string& queue);

  db::pool& pool_;
  std::shared_ptr<const process_registry> registry_;
  process_store store_;
  std::mutex mtx_;
  /// Reply queues this manager created (or found).
  std::set<std::string> queues_;
};

} // namespace cmdbus
