#include "cmdbus/process/registry.hpp"

#include <set>

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
                           std::shared_ptr<const workflow> w,
                           process_type_options opts) {
  if (!w)
    throw std::invalid_argument("process_registry::add: no workflow");
  auto shared = process_reply_queue(domain);
  if (opts.reply_queue.empty())
    opts.reply_queue = std::move(shared);
  else
    db::validate_queue_name(opts.reply_queue);
  auto key = std::make_pair(domain, w->process_type());
  if (workflows_.count(key) > 0)
    throw duplicate_workflow_error("a workflow for process type "
                                   + w->process_type() + " of domain " + domain
                                   + " is registered already");
  workflows_.emplace(std::move(key),
                     entry{std::move(w), std::move(opts.reply_queue)});
}

const workflow* process_registry::find(const std::string& domain,
                                       const std::string& process_type) const {
  auto i = workflows_.find({domain, process_type});
  return i == workflows_.end() ? nullptr : i->second.w.get();
}

const std::string&
process_registry::reply_queue(const std::string& domain,
                              const std::string& process_type) const {
  auto i = workflows_.find({domain, process_type});
  if (i == workflows_.end())
    throw std::out_of_range("no workflow for process type " + process_type
                            + " of domain " + domain + " is registered");
  return i->second.reply_queue;
}

std::vector<std::string>
process_registry::reply_queues(const std::string& domain) const {
  std::set<std::string> out{process_reply_queue(domain)};
  for (auto& [key, e] : workflows_)
    if (key.first == domain)
      out.insert(e.reply_queue);
  return {out.begin(), out.end()};
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
