#pragma once

// The process types a worker drives, by (domain, process_type), and the
// reply queue of each. Plain C++: an application fills one and hands it to
// its worker (actors/worker.hpp) and to a process_manager
// (process/manager.hpp).

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/process/workflow.hpp"

namespace cmdbus {

/// The suffix of a domain's process reply queue.
inline constexpr const char* process_replies_suffix = "__process_replies";

/// Returns "{domain}__process_replies", the queue the replies to a domain's
/// process steps go to (validated: a domain of at most 30 characters, so
/// that the queue name stays within PGMQ's 47; throws db::invalid_argument).
std::string process_reply_queue(const std::string& domain);

/// How a process type is registered.
struct process_type_options {
  /// The queue the replies to its processes' commands go to; empty: the
  /// domain's shared `{domain}__process_replies`. A queue of its own keeps
  /// its replies away from other process managers that read the shared one
  /// (docs/processes.md, "Several process managers on one domain").
  std::string reply_queue;
};

/// Raised when a (domain, process_type) gets a second workflow.
class duplicate_workflow_error : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

class process_registry {
public:
  /// Registers `w` for `domain`, its replies on `opts.reply_queue` (by
  /// default the domain's shared queue). Throws duplicate_workflow_error for
  /// a second workflow of the same (domain, process_type), and
  /// db::invalid_argument for a domain or reply queue whose name is invalid.
  void add(const std::string& domain, std::shared_ptr<const workflow> w,
           process_type_options opts = {});

  /// Returns the workflow of (domain, process_type), or null.
  const workflow* find(const std::string& domain,
                       const std::string& process_type) const;

  /// Returns the reply queue of (domain, process_type); throws
  /// std::out_of_range when the type is not registered in the domain.
  const std::string& reply_queue(const std::string& domain,
                                 const std::string& process_type) const;

  /// Returns the reply queues a worker reads for `domain`, sorted: the
  /// domain's shared queue (always: processes started before a type got a
  /// queue of its own still answer there) and every queue of its own of the
  /// domain's types.
  std::vector<std::string> reply_queues(const std::string& domain) const;

  /// Returns the domains with at least one workflow, sorted.
  std::vector<std::string> domains() const;

  /// Returns the process types of `domain`, sorted.
  std::vector<std::string> types(const std::string& domain) const;

  bool empty() const noexcept {
    return workflows_.empty();
  }

private:
  struct entry {
    std::shared_ptr<const workflow> w;
    std::string reply_queue;
  };
  std::map<std::pair<std::string, std::string>, entry> workflows_;
};

} // namespace cmdbus
