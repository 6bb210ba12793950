#pragma once

// The process types a worker drives, by (domain, process_type), and the
// naming of their reply queues. Plain C++: an application fills one and
// hands it to its worker (actors/worker.hpp) and to a process_manager
// (process/manager.hpp).

#include <map>
#include <memory>
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

/// Raised when a (domain, process_type) gets a second workflow.
class duplicate_workflow_error : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

class process_registry {
public:
  /// Registers `w` for `domain`. Throws duplicate_workflow_error for a
  /// second workflow of the same (domain, process_type), and
  /// db::invalid_argument for a domain whose reply queue name is invalid.
  void add(const std::string& domain, std::shared_ptr<const workflow> w);

  /// Returns the workflow of (domain, process_type), or null.
  const workflow* find(const std::string& domain,
                       const std::string& process_type) const;

  /// Returns the domains with at least one workflow, sorted.
  std::vector<std::string> domains() const;

  /// Returns the process types of `domain`, sorted.
  std::vector<std::string> types(const std::string& domain) const;

  bool empty() const noexcept {
    return workflows_.empty();
  }

private:
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const workflow>>
    workflows_;
};

} // namespace cmdbus
