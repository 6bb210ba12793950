#include "cmdbus/process/process_writer.hpp"

#include <algorithm>
#include <iterator>

#include <caf/all.hpp>

#include "cmdbus/actors/worker/fault.hpp"
#include "cmdbus/db/text_format.hpp"
#include "cmdbus/db/transaction.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using self_ptr = process_writer_actor::stateful_pointer<process_writer_state>;

void archive(db::connection& conn, const std::string& queue, int64_t msg_id) {
  conn.query("SELECT pgmq.archive($1, $2::bigint)", queue, msg_id);
}

// A reply that cannot apply now: left to reappear, or archived once it
// failed max_reads reads.
apply_outcome failed(process_writer_state& st, const process_reply_message& m,
                     const std::string& why) {
  auto pid = m.process_id.to_string();
  if (m.read_ct < st.settings.max_reads) {
    log::from(st.name).warn("{}: reply msg_id {} for process {} not applied "
                            "(read {} of {}): {}; it comes again after its "
                            "visibility timeout",
                            st.name, m.msg_id, pid, m.read_ct,
                            st.settings.max_reads, why);
    return {apply_kind::left, std::nullopt, why, {}};
  }
  try {
    archive(st.session->get(), st.settings.queue, m.msg_id);
  } catch (const std::exception& e) {
    return {apply_kind::left,
            std::nullopt,
            why + "; archiving failed: " + log::one_line(e.what()),
            {}};
  }
  log::from(st.name).error("{}: reply msg_id {} for process {} archived in "
                           "the archive of {} after {} reads: {}",
                           st.name, m.msg_id, pid, st.settings.queue, m.read_ct,
                           why);
  return {apply_kind::archived, std::nullopt, why, {}};
}

} // namespace

namespace {

// The messages of the replies applied deleted, and those naming no
// process archived, in one round trip.
void finish_messages(process_writer_state& st, db::connection& conn,
                     const std::vector<int64_t>& done,
                     const std::vector<int64_t>& unknown) {
  std::vector<db::connection::statement> sts;
  if (!done.empty())
    sts.push_back({"SELECT count(*) FROM pgmq.delete($1, $2::bigint[])",
                   {st.settings.queue, db::array_literal(done)},
                   "cmdbus_process_delete"});
  if (!unknown.empty())
    sts.push_back({"SELECT count(*) FROM pgmq.archive($1, $2::bigint[])",
                   {st.settings.queue, db::array_literal(unknown)},
                   "cmdbus_process_archive"});
  if (!sts.empty())
    conn.pipeline(sts);
}

apply_outcome retry_later(process_writer_state& st) {
  return {apply_kind::retry, std::nullopt, "database unavailable",
          st.session->outage().retry_in()};
}

} // namespace

namespace {

// Applies `ms` in one transaction on the session (the store's set-based
// statements for the whole group, then the messages' delete) and commits;
// throws what failed (nothing of the group is then written).
std::vector<apply_outcome>
apply_together(process_writer_state& st,
               const std::vector<process_reply_message>& ms) {
  auto& s = st.settings;
  auto out = db::in_transaction(st.session->get(), [&](db::connection& conn) {
    std::vector<process_reply> replies;
    replies.reserve(ms.size());
    for (auto& m : ms)
      replies.push_back({m.process_id, m.r});
    auto ts = st.store.apply_many(conn, s.domain, replies,
                                  [&s](const std::string& type) {
                                    return s.registry->find(s.domain, type);
                                  });
    std::vector<int64_t> done, unknown;
    std::vector<apply_outcome> applied;
    applied.reserve(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      auto& t = ts[i];
      if (t.disposition == reply_disposition::unknown_process) {
        unknown.push_back(ms[i].msg_id);
        applied.push_back(
          {apply_kind::archived, std::nullopt, "no such process", {}});
        continue;
      }
      done.push_back(ms[i].msg_id);
      applied.push_back(
        {t.changed() ? apply_kind::applied : apply_kind::ignored,
         t.status,
         std::string{to_string(t.disposition)},
         {}});
    }
    finish_messages(st, conn, done, unknown);
    maybe_crash(fault_point::before_process_commit);
    return applied;
  });
  maybe_crash(fault_point::after_process_commit);
  st.session->succeeded();
  for (size_t i = 0; i < ms.size(); ++i)
    if (out[i].kind == apply_kind::archived)
      log::from(st.name).warn("{}: reply msg_id {} names process {}, which "
                              "does not exist in domain {}; archived",
                              st.name, ms[i].msg_id,
                              ms[i].process_id.to_string(), s.domain);
  return out;
}

} // namespace

apply_outcome apply_reply(process_writer_state& st,
                          const process_reply_message& m) {
  if (st.session->outage().backing_off())
    return retry_later(st);
  try {
    return apply_together(st, {m}).front();
  } catch (const unknown_workflow_error& e) {
    // Not ours: the router reads only the replies of the types served here,
    // so this cannot come from the queue; whatever brought it, it is left
    // to the manager that serves its type and never archived.
    st.session->succeeded();
    log::from(st.name).error("{}: reply msg_id {} for process {} not applied: "
                             "{}; left for the process manager of its type",
                             st.name, m.msg_id, m.process_id.to_string(),
                             log::one_line(e.what()));
    return {apply_kind::left, std::nullopt, log::one_line(e.what()), {}};
  } catch (const std::exception& e) {
    if (is_unavailable(e)) {
      auto delay = st.session->failed(e);
      return {apply_kind::retry, std::nullopt, log::one_line(e.what()), delay};
    }
    st.session->succeeded();
    return failed(st, m, log::one_line(e.what()));
  }
}

std::vector<apply_outcome>
apply_replies(process_writer_state& st,
              const std::vector<process_reply_message>& ms) {
  if (ms.size() == 1)
    return {apply_reply(st, ms.front())};
  if (st.session->outage().backing_off())
    return std::vector<apply_outcome>(ms.size(), retry_later(st));
  try {
    return apply_together(st, ms);
  } catch (const std::exception& e) {
    if (is_unavailable(e)) {
      auto delay = st.session->failed(e);
      return std::vector<apply_outcome>(
        ms.size(), apply_outcome{apply_kind::retry, std::nullopt,
                                 log::one_line(e.what()), delay});
    }
  }
  // One of them cannot apply (its workflow threw, or it has none here):
  // the shared transaction is rolled back; each on its own now, so that
  // one cannot hold back the others.
  std::vector<apply_outcome> out;
  for (auto& m : ms)
    out.push_back(apply_reply(st, m));
  return out;
}

process_writer_actor::behavior_type
process_writer(self_ptr self, process_settings settings, apply_fn apply,
               sweep_fn sweep) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.name = "process-writer/" + st.settings.domain;
  // The backoff runs on the actor's clock, as the completion writer's
  // (which a deterministic test moves by hand).
  st.session = std::make_unique<db_session>(
    st.name, process_session_options(st.settings),
    process_db_errors(st.settings), [self] { return self->clock().now(); });
  st.session->report_outages_to(st.settings.health);
  st.apply = apply
               ? std::move(apply)
               : apply_fn{[self](const std::vector<process_reply_message>& ms) {
                   return apply_replies(self->state, ms);
                 }};
  st.sweep = sweep ? std::move(sweep) : sweep_fn{[self]() -> int64_t {
    auto& st = self->state;
    if (st.session->outage().backing_off())
      return 0;
    try {
      auto ids = st.store.mark_waiting_for_tsq(
        st.session->get(), st.settings.domain, st.settings.types);
      st.session->succeeded();
      for (auto& id : ids)
        log::from(st.name).warn("{}: process {} waits for an operator: the "
                                "command of its step is in the "
                                "troubleshooting queue (WAITING_FOR_TSQ)",
                                st.name, id.to_string());
      return static_cast<int64_t>(ids.size());
    } catch (const std::exception& e) {
      if (is_unavailable(e))
        st.session->failed(e);
      else
        log::from(st.name).warn("{}: the TSQ sweep failed: {}", st.name,
                                log::one_line(e.what()));
      return 0;
    }
  }};
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.session->close();
    self->quit(em.reason);
  });
  return {
    [self](atom::apply,
           process_reply_message& m) -> caf::result<apply_outcome> {
      auto& st = self->state;
      st.buffer.push_back(std::move(m));
      st.answers.push_back(self->make_response_promise<apply_outcome>());
      if (!st.flush_scheduled) {
        // Behind the replies already in the mailbox: they join the group.
        st.flush_scheduled = true;
        self->send(self, atom::flush::value);
      }
      return st.answers.back();
    },
    [self](atom::flush) {
      auto& st = self->state;
      st.flush_scheduled = false;
      auto n = std::min(st.buffer.size(), process_writer_state::max_group);
      std::vector<process_reply_message> group(
        std::make_move_iterator(st.buffer.begin()),
        std::make_move_iterator(st.buffer.begin() + n));
      std::vector<caf::typed_response_promise<apply_outcome>> answers(
        st.answers.begin(), st.answers.begin() + n);
      st.buffer.erase(st.buffer.begin(), st.buffer.begin() + n);
      st.answers.erase(st.answers.begin(), st.answers.begin() + n);
      if (!st.buffer.empty()) {
        st.flush_scheduled = true;
        self->send(self, atom::flush::value);
      }
      auto outcomes = st.apply(group);
      for (size_t i = 0; i < answers.size(); ++i)
        answers[i].deliver(
          i < outcomes.size()
            ? std::move(outcomes[i])
            : apply_outcome{apply_kind::left, std::nullopt, "no outcome", {}});
    },
    [self](atom::sweep) { return self->state.sweep(); },
  };
}

process_writer_actor spawn_process_writer(caf::actor_system& sys,
                                          const process_settings& settings) {
  return sys.spawn<caf::detached>(process_writer, settings, apply_fn{},
                                  sweep_fn{});
}

} // namespace cmdbus::actors

namespace cmdbus {

const char* to_string(apply_kind k) noexcept {
  switch (k) {
    case apply_kind::applied: return "applied";
    case apply_kind::ignored: return "ignored";
    case apply_kind::archived: return "archived";
    case apply_kind::left: return "left";
    default: return "retry";
  }
}

} // namespace cmdbus
