#include "cmdbus/actors/worker/completion.hpp"

#include <caf/all.hpp>

#include "cmdbus/actors/worker/fault.hpp"

namespace cmdbus::actors {

void completion_state::commit(pointer self, size_t n) {
  auto& st = self->state;
  std::vector<db::finished_command> items;
  auto res = write_prefix(st, n, items);
  maybe_crash(fault_point::after_commit);
  for_each_own(st, items, res.states, [&](const db::finished_command& x) {
    auto& m = st.settings.metrics->of(x.rc.cmd.command_type);
    switch (x.out.kind) {
      case outcome_kind::success: m.completed += 1; break;
      case outcome_kind::business_rule: m.failed += 1; break;
      default: m.moved_to_tsq += 1; break;
    }
  });
  if (!res.completed_batches.empty())
    self->send(st.parent, atom::batches::value, st.settings.domain,
               std::move(res.completed_batches));
  self->send(st.parent, atom::committed::value, static_cast<int64_t>(n));
}

// The refused outcome goes to the troubleshooting queue so that an operator
// sees it (and can retry it) rather than the command running again and
// again into the same refusal.
void completion_state::refused(pointer self, const std::exception& e) {
  auto& x = self->state.buffer.front();
  log::from(self->state.name)
    .error("{}: the database refused the outcome of command {} (msg_id "
           "{}): {}; moving it to the troubleshooting queue",
           self->state.name, x.rc.cmd.command_id.to_string(), x.rc.msg_id,
           log::one_line(e.what()));
  outcome out;
  out.kind = outcome_kind::permanent;
  out.error_code = "OUTCOME_NOT_WRITTEN";
  out.error_message = to_valid_text(std::string{"the database refused the "
                                                "command's outcome: "}
                                    + e.what());
  x.out = std::move(out);
  x.exhausted = false;
  x.rc.cmd.reply_to.reset();
  commit(self, 1);
}

completion_actor::behavior_type
completion(completion_state::pointer self, domain_settings settings,
           writer_parent_actor parent, finish_fn write) {
  if (write) {
    self->state.write = std::move(write);
  } else {
    self->state.write = [self](const std::vector<db::finished_command>& xs) {
      auto& st = self->state;
      db::worker_store store{st.connection(), st.settings.domain};
      store.record_batch_completions(st.settings.record_batches);
      return store.finish(xs);
    };
  }
  return start_writer<completion_state>(self, std::move(settings),
                                        std::move(parent));
}

completion_actor spawn_completion_writer(caf::actor_system& sys,
                                         const domain_settings& settings,
                                         writer_parent_actor parent,
                                         finish_fn write, bool detached) {
  if (detached)
    return sys.spawn<caf::detached>(completion, settings, std::move(parent),
                                    std::move(write));
  return sys.spawn(completion, settings, std::move(parent), std::move(write));
}

} // namespace cmdbus::actors
