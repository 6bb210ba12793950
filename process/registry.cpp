#include "cmdbus/process/registry.hpp"

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"

namespace cmdbus {

std::string process_reply_queue(const std::string& domain) {
  db::validate_domain(domain);
  auto queue = domain + process_replies_suffix;
  db::validate_queue_name(queue);
  return queue;
}

void process_registry::add(const std::string& domain,
                           std::shared_ptr<const workflow> w) {
  if (!w)
    throw std::invalid_argument("process_registry::add: no workflow");
  process_reply_queue(domain);
  auto key = std::make_pair(domain, w->process_type());
  if (workflows_.count(key) > 0)
    throw duplicate_workflow_error("a workflow for process type "
                                   + w->process_type() + " of domain " + domain
                                   + " is registered already");
  workflows_.emplace(std::move(key), std::move(w));
}

const workflow* process_registry::find(const std::string& domain,
                                       const std::string& process_type) const {
  auto i = workflows_.find({domain, process_type});
  return i == workflows_.end() ? nullptr : i->second.get();
}

std::vector<std::string> process_registry::domains() const {
  std::vector<std::string> out;
  for (auto& [key, w] : workflows_)
    if (out.empty() || out.back() != key.first)
      out.push_back(key.first);
  return out;
}

std::vector<std::string>
process_registry::types(const std::string& domain) const {
  std::vector<std::string> out;
  for (auto& [key, w] : workflows_)
    if (key.first == domain)
      out.push_back(key.second);
  return out;
}

} // namespace cmdbus
