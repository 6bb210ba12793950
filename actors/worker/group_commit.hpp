#pragma once

// The group-commit machinery the two writers (completion, retry scheduler)
// share: a database session and a buffer written as one transaction
// whenever the mailbox runs empty or the buffer is full (the busier, the
// larger the batches), and an error backoff that keeps the buffer (nothing
// is dropped) until a write succeeds.
//
// A writer's state derives from writer_state<Item> and adds:
//   using handle_type = <its typed handle>;
//   using item_atom = <the atom of its items>;
//   <its write function> write;
//   static void commit(pointer self, size_t n);   // write n, report
//   static void refused(pointer self, const std::exception& e);
//   static inline const char* name = "...";
//
// No delayed_send: a message pending in CAF's clock for a detached actor
// keeps the actor alive at shutdown, so timed writes use the behaviour's
// idle timeout (caf::after), which dies with the actor. That timeout
// restarts with every message, so a busy writer also checks the backoff's
// end on each message (see writer_behavior).

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/after.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "cmdbus/actors/worker/db_session.hpp"
#include "cmdbus/actors/interfaces.hpp"
#include "cmdbus/actors/worker/spawn.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/worker_store.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

/// Most side effects written in one transaction.
constexpr size_t max_flush = 512;

/// The state both writers share (see the top of this file).
template <class Item>
struct writer_state {
  domain_settings settings;
  /// The supervisor: takes (atom::committed, n), (atom::unavailable) and
  /// (atom::batches, ...).
  writer_parent_actor parent;
  std::unique_ptr<db_session> session;
  std::vector<Item> buffer;
  /// When the oldest buffered item arrived.
  std::chrono::steady_clock::time_point oldest;
  /// When the last write ended (successful or not), and how many items it
  /// had.
  std::chrono::steady_clock::time_point last_write;
  size_t last_size = 0;
  /// Set while waiting for the error backoff to pass.
  std::optional<std::chrono::milliseconds> retry_in;
  /// The timeout of the current behaviour: none while the buffer is empty
  /// (an idle writer sleeps), flush_interval while items wait, retry_in
  /// while backing off.
  std::optional<std::chrono::milliseconds> armed;
  /// "<writer>/<domain>".
  std::string name;

  db::connection& connection() {
    return session->get();
  }

  /// Records a failed write: reports an unavailable database to the
  /// supervisor (its watchdog tells an outage from a stuck writer) and
  /// starts the backoff.
  template <class Self>
  void on_failure(Self* self, const std::exception& e) {
    if (is_unavailable(e))
      self->send(parent, atom::unavailable::value);
    retry_in = session->failed(e);
  }

  /// Returns whether the backoff after a failed write has passed.
  bool retry_due() const {
    return retry_in && !session->outage().backing_off();
  }
};

/// The self pointer of a writer with state `State`.
template <class State>
using writer_pointer =
  typename State::handle_type::template stateful_pointer<State>;

/// The behaviour of a writer with state `State`.
template <class State>
using writer_behavior_type = typename State::handle_type::behavior_type;

/// Counts the stale outcomes of one write and logs them and those written
/// already by an earlier attempt of the same write.
void count_unwritten(const std::string& who, const domain_settings& settings,
                     size_t stale, size_t already_written);

/// Calls `own(item)` for each item of one write whose outcome is the
/// worker's own: written by this write or by an earlier attempt of it whose
/// answer was lost (`states` as the store returned them). The stale ones
/// are left out, counted and logged (count_unwritten).
template <class State, class Item, class F>
void for_each_own(const State& st, const std::vector<Item>& items,
                  const std::vector<db::write_state>& states, F own) {
  size_t stale = 0;
  size_t already_written = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    auto state = db::state_of(states, i);
    if (state == db::write_state::stale) {
      ++stale;
      continue;
    }
    if (state == db::write_state::already_written)
      ++already_written;
    own(items[i]);
  }
  count_unwritten(st.name, st.settings, stale, already_written);
}

/// Returns whether the database refused a write because of what one of its
/// items holds (bad data, a broken constraint; or the item could not even be
/// encoded), as opposed to a failure that says nothing about the items (an
/// outage, a conflict, a broken schema), which is retried as it is.
bool refused_for_content(const std::exception& e);

/// Writes the first `n` buffered items with `st.write` and moves them to
/// `items`; on failure the buffer stays as it was. The whole buffer is
/// swapped out (and back on failure); a part of it (one item, when writing
/// one by one) is copied.
template <class State, class Item>
auto write_prefix(State& st, size_t n, std::vector<Item>& items) {
  auto whole = n == st.buffer.size();
  if (whole)
    items.swap(st.buffer);
  else
    items.assign(st.buffer.begin(), st.buffer.begin() + n);
  try {
    auto res = st.write(items);
    if (!whole)
      st.buffer.erase(st.buffer.begin(), st.buffer.begin() + n);
    return res;
  } catch (...) {
    if (whole)
      st.buffer.swap(items);
    throw;
  }
}

/// Writes the buffer as one transaction. When the database refuses it for
/// what an item holds, the items of that write are written one by one, so
/// that one bad item cannot hold back the others for ever; the refused one
/// is handled by State::refused. Any other failure keeps the buffer and
/// starts the backoff.
template <class State>
void flush(writer_pointer<State> self) {
  auto& st = self->state;
  size_t one_by_one = 0;
  while (!st.buffer.empty()) {
    auto n = one_by_one > 0 ? size_t{1} : st.buffer.size();
    try {
      try {
        State::commit(self, n);
      } catch (const std::exception& e) {
        if (!refused_for_content(e))
          throw;
        if (n > 1) {
          log::from(st.name).warn(
            "{}: the database refused a write of {} items ({}); "
            "writing them one by one",
            st.name, n, log::one_line(e.what()));
          one_by_one = n;
          continue;
        }
        State::refused(self, e);
      }
      st.session->succeeded();
      st.retry_in.reset();
    } catch (const std::exception& e) {
      st.on_failure(self, e);
      return;
    }
    if (one_by_one == 0 || --one_by_one == 0)
      return;
  }
}

/// Writes the buffer now (if any) and remembers when and how much, for the
/// light-load rule of writer_behavior.
template <class State>
void write_now(writer_pointer<State> self) {
  auto& st = self->state;
  if (st.buffer.empty())
    return;
  auto n = st.buffer.size();
  flush<State>(self);
  st.last_write = std::chrono::steady_clock::now();
  st.last_size = n;
}

/// Returns the timeout the writer's behaviour needs now (see armed).
template <class State>
std::optional<std::chrono::milliseconds> wanted_timeout(const State& st) {
  if (st.retry_in)
    return st.retry_in;
  if (st.buffer.empty())
    return std::nullopt;
  return std::max(std::chrono::milliseconds{1},
                  st.settings.cfg->flush_interval);
}

template <class State, class... Extra>
writer_behavior_type<State>
writer_behavior(writer_pointer<State> self, Extra... extra);

/// Switches the behaviour when its timeout must change (buffer filled or
/// emptied, backoff started, grew or ended).
template <class State, class... Extra>
void refresh(writer_pointer<State> self, Extra... extra) {
  if (wanted_timeout(self->state) != self->state.armed)
    self->become(writer_behavior<State>(self, extra...));
}

/// The behaviour of both writers: buffer each item; write when the buffer
/// is full or the mailbox ran empty (see update), on (atom::flush), and
/// when the timeout passes; after a failure, wait for the backoff (the
/// buffer is kept and keeps growing). `extra` are further handlers.
template <class State, class... Extra>
writer_behavior_type<State>
writer_behavior(writer_pointer<State> self, Extra... extra) {
  auto update = [self, extra...] {
    auto& st = self->state;
    if (st.retry_due()) {
      // The backoff passed while items kept arriving (the idle timeout
      // never fired): try again now.
      st.retry_in.reset();
      write_now<State>(self);
    } else if (!st.retry_in && !st.buffer.empty()) {
      // Group commit: write when full, or when nothing else is queued and
      // either the oldest item waited flush_interval (so that the batch can
      // grow while handlers are still finishing; the timeout covers a lull)
      // or the load is light: the last write had a single item, or the
      // oldest came a flush_interval after it (waiting would only add
      // latency). Under load, items queue while a write runs and the
      // batches grow by themselves.
      auto interval = st.settings.cfg->flush_interval;
      auto waited = std::chrono::steady_clock::now() - st.oldest;
      auto quiet = st.last_size <= 1 || st.oldest - st.last_write >= interval;
      if (st.buffer.size() >= max_flush
          || (self->mailbox().empty() && (quiet || waited >= interval)))
        write_now<State>(self);
    }
    refresh<State>(self, extra...);
  };
  using item_type = typename decltype(State::buffer)::value_type;
  auto on_item = [self, update](typename State::item_atom, item_type& x) {
    auto& st = self->state;
    if (st.buffer.empty())
      st.oldest = std::chrono::steady_clock::now();
    st.buffer.push_back(std::move(x));
    update();
  };
  auto on_flush = [self, extra...](atom::flush) {
    if (!self->state.retry_in)
      write_now<State>(self);
    refresh<State>(self, extra...);
  };
  auto& st = self->state;
  st.armed = wanted_timeout(st);
  if (!st.armed)
    return {on_item, on_flush, extra...};
  return {on_item, on_flush, extra...,
          caf::after(*st.armed) >> [self, extra...] {
            self->state.retry_in.reset();
            write_now<State>(self);
            refresh<State>(self, extra...);
          }};
}

/// Starts a writer: on exit it writes what is buffered first, unless the
/// database is failing (a failure, or nothing written, leaves the messages
/// to reappear after their visibility timeout: nothing is lost).
template <class State, class... Extra>
writer_behavior_type<State>
start_writer(writer_pointer<State> self, domain_settings settings,
             writer_parent_actor parent, Extra... extra) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.parent = std::move(parent);
  st.name = std::string{State::role} + "/" + st.settings.domain;
  st.session = std::make_unique<db_session>(
    st.name, session_for(st.settings, "cmdbus-worker"),
    db_error_counter(st.settings, State::metrics_actor),
    [self] { return self->clock().now(); });
  st.session->report_outages_to(st.settings.health);
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    if (!st.buffer.empty() && st.session->outage().failing())
      log::from(st.name).warn(
        "{} stops with {} side effect(s) not written; their "
        "messages reappear after the visibility timeout",
        st.name, st.buffer.size());
    else
      flush<State>(self);
    st.session->close();
    self->quit(em.reason);
  });
  return writer_behavior<State>(self, extra...);
}

} // namespace cmdbus::actors
