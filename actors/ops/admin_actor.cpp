#include "cmdbus/actors/ops/admin_actor.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::admin {

namespace {

admin_state::sample take_sample(const view& v) {
  admin_state::sample s;
  s.at = std::chrono::steady_clock::now();
  s.total = v.finished;
  for (auto& d : v.domains)
    s.domains.push_back(d.finished);
  return s;
}

caf::error version_refusal(int32_t version) {
  return caf::make_error(
    actors::ec::protocol_mismatch,
    "the admin actor speaks admin protocol " + std::to_string(protocol_version)
      + ", the request " + std::to_string(version));
}

} // namespace

void admin_state::remember(sample s) {
  samples.push_back(std::move(s));
  while (samples.size() > 2
         && samples.back().at - samples.front().at > throughput_window)
    samples.pop_front();
}

std::string admin_state::status() {
  auto v = src->read();
  auto now = take_sample(v);
  std::vector<double> per_domain(v.domains.size(), -1);
  double total = 0;
  bool known = false;
  if (!samples.empty()) {
    auto& first = samples.front();
    auto seconds = std::chrono::duration<double>(now.at - first.at).count();
    if (seconds > 0.5) {
      known = true;
      total = static_cast<double>(now.total - first.total) / seconds;
      for (size_t i = 0; i < v.domains.size() && i < first.domains.size();
           ++i)
        if (now.domains[i] >= 0 && first.domains[i] >= 0)
          per_domain[i]
            = static_cast<double>(now.domains[i] - first.domains[i]) / seconds;
    }
  }
  return status_json(*src, v, per_domain, total, known);
}

admin_impl_actor::behavior_type
admin(admin_impl_actor::stateful_pointer<admin_state> self,
      std::shared_ptr<const source> src) {
  auto& st = self->state;
  st.src = std::move(src);
  st.remember(take_sample(st.src->read()));
  self->delayed_send(self, admin_state::sample_every, atom::sample::value);
  return {
    [self](atom::status, int32_t version) -> caf::result<std::string> {
      if (version != protocol_version)
        return version_refusal(version);
      return self->state.status();
    },
    [self](atom::drain, int32_t version) -> caf::result<std::string> {
      auto& st = self->state;
      if (version != protocol_version)
        return version_refusal(version);
      if (!st.src->drain)
        return caf::make_error(actors::ec::unsupported,
                               "a handler node takes no work of its own: "
                               "drain the workers that use it");
      log::from(admin_state::name)
        .info("drain requested through the admin port");
      st.src->drain();
      return st.status();
    },
    [self](atom::sample) {
      self->delayed_send(self, admin_state::sample_every, atom::sample::value);
      auto& st = self->state;
      st.remember(take_sample(st.src->read()));
    },
  };
}

} // namespace cmdbus::admin
