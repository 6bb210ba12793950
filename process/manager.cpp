#include "cmdbus/process/manager.hpp"

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"

namespace cmdbus {

process_manager::process_manager(
  db::pool& pool, std::shared_ptr<const process_registry> registry,
  process_store_options opts)
  : pool_(pool), registry_(std::move(registry)), store_(opts) {
  if (!registry_)
    throw std::invalid_argument("process_manager: no registry");
}

const workflow&
process_manager::workflow_of(const std::string& domain,
                             const std::string& process_type) const {
  if (auto* w = registry_->find(domain, process_type))
    return *w;
  throw unknown_process_type_error("no workflow for process type "
                                   + process_type + " in domain " + domain
                                   + " is registered");
}

void process_manager::ensure_reply_queue(db::connection& conn,
                                         const std::string& queue) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (queues_.count(queue) > 0)
      return;
  }
  db::create_queue(conn, queue);
  std::lock_guard<std::mutex> guard{mtx_};
  queues_.insert(queue);
}

uuid process_manager::start(const std::string& domain,
                            const std::string& process_type, const json& input,
                            const std::optional<uuid>& batch_id) {
  auto& w = workflow_of(domain, process_type);
  auto& queue = registry_->reply_queue(domain, process_type);
  auto lease = pool_.acquire();
  ensure_reply_queue(*lease, queue);
  return store_.start(*lease, w, domain, input, queue, batch_id);
}

uuid process_manager::start(db::connection& conn, const std::string& domain,
                            const std::string& process_type, const json& input,
                            const std::optional<uuid>& batch_id) {
  auto& w = workflow_of(domain, process_type);
  auto& queue = registry_->reply_queue(domain, process_type);
  // Created outside the caller's transaction would be better, but PGMQ's
  // create is idempotent and transactional: inside it, a rollback only
  // undoes a creation nobody else relied on.
  ensure_reply_queue(conn, queue);
  return store_.start(conn, w, domain, input, queue, batch_id);
}

std::optional<process_metadata> process_manager::get(const std::string& domain,
                                                     const uuid& process_id) {
  auto lease = pool_.acquire();
  return store_.get(*lease, domain, process_id);
}

std::vector<process_metadata> process_manager::list(const std::string& domain,
                                                    const process_query& q) {
  auto lease = pool_.acquire();
  return store_.list(*lease, domain, q);
}

std::vector<process_audit_entry>
process_manager::audit_trail(const std::string& domain,
                             const uuid& process_id) {
  auto lease = pool_.acquire();
  return store_.audit_trail(*lease, domain, process_id);
}

uuid process_manager::create_batch(const std::string& domain, int total_count,
                                   const std::optional<std::string>& name,
                                   const std::optional<uuid>& batch_id) {
  auto lease = pool_.acquire();
  return store_.create_batch(*lease, domain, total_count, name, std::nullopt,
                             batch_id);
}

} // namespace cmdbus
