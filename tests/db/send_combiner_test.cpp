// The client-side group commit of concurrent sends (db/send_combiner.hpp),
// without a database: fake ways of sending record the groups the combiner
// forms and fail where a test wants. The same protocol against PostgreSQL
// is covered by BusThreads in bus_threads_test.cpp.

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/send_combiner.hpp"
#include "cmdbus/model/errors.hpp"
#include "tests/support/eventually.hpp"

using namespace cmdbus;

namespace {

db::prepared_command item(const std::string& name) {
  db::prepared_command p;
  p.domain = "d";
  p.command_type = name;
  p.command_id = uuid::random();
  return p;
}

// The msg_id a fake send gives a command: its name's first letter.
int64_t msg_id_of(const db::prepared_command& p) {
  return static_cast<int64_t>(p.command_type.at(0));
}

/// Fake ways of sending: records every call; the first alone send of
/// `blocked_name` waits until `release()`.
struct fake_sender {
  std::mutex mtx;
  std::vector<std::vector<std::string>> together_calls;
  std::vector<std::string> alone_calls;
  std::string blocked_name;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::function<void(const db::send_combiner::group&)> on_together;
  std::function<void(const db::prepared_command&)> on_alone;

  void release() {
    gate.set_value();
  }

  db::send_combiner make(size_t max_group_size, size_t max_concurrent) {
    return db::send_combiner{
      max_group_size, max_concurrent,
      [this](const db::send_combiner::group& g) {
        {
          std::lock_guard<std::mutex> guard{mtx};
          std::vector<std::string> names;
          for (auto& member : g)
            names.push_back(member->item.command_type);
          together_calls.push_back(names);
        }
        if (on_together)
          on_together(g);
        for (auto& member : g)
          if (!member->error)
            member->result = {member->item.command_id,
                              msg_id_of(member->item)};
      },
      [this](const db::prepared_command& p) {
        {
          std::lock_guard<std::mutex> guard{mtx};
          alone_calls.push_back(p.command_type);
        }
        if (p.command_type == blocked_name)
          opened.wait();
        if (on_alone)
          on_alone(p);
        return send_result{p.command_id, msg_id_of(p)};
      }};
  }

  std::vector<std::vector<std::string>> groups() {
    std::lock_guard<std::mutex> guard{mtx};
    return together_calls;
  }

  std::vector<std::string> alone() {
    std::lock_guard<std::mutex> guard{mtx};
    return alone_calls;
  }
};

/// A caller on its own thread, with its outcome.
struct caller {
  std::string name;
  std::future<send_result> outcome;

  caller(db::send_combiner& c, std::string n) : name(std::move(n)) {
    outcome = std::async(std::launch::async,
                         [&c, x = item(name)] { return c.send(x); });
  }
};

/// Starts callers one after the other, each once the one before it is
/// queued, so that their arrival order is known. Needs a leader that is
/// busy.
std::vector<std::unique_ptr<caller>>
queue_callers(db::send_combiner& c, const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<caller>> out;
  auto before = c.queued();
  for (auto& name : names) {
    out.push_back(std::make_unique<caller>(c, name));
    auto want = ++before;
    EXPECT_TRUE(test::eventually([&] { return c.queued() == want; }))
      << name << " never queued";
  }
  return out;
}

/// Starts the caller "a", which leads alone and blocks in its send.
std::unique_ptr<caller> busy_leader(fake_sender& fake,
                                    db::send_combiner& c) {
  fake.blocked_name = "a";
  auto a = std::make_unique<caller>(c, "a");
  EXPECT_TRUE(test::eventually([&] { return fake.alone().size() == 1; }));
  return a;
}

/// Lets `names` queue one after the other behind a busy leader "a", then
/// lets "a" finish, so that they form the next group(s). Returns them.
std::vector<std::unique_ptr<caller>>
queue_behind_leader(fake_sender& fake, db::send_combiner& c,
                    const std::vector<std::string>& names) {
  auto a = busy_leader(fake, c);
  auto waiting = queue_callers(c, names);
  fake.release();
  EXPECT_EQ(a->outcome.get().msg_id, 'a');
  return waiting;
}

} // namespace

TEST(SendCombiner, ALoneCallerIsSentAloneAtOnce) {
  fake_sender fake;
  auto c = fake.make(10, 2);
  auto x = item("x");
  auto r = c.send(x);
  EXPECT_EQ(r.command_id, x.command_id);
  EXPECT_EQ(r.msg_id, 'x');
  EXPECT_EQ(fake.alone(), std::vector<std::string>{"x"});
  EXPECT_TRUE(fake.groups().empty());
}

TEST(SendCombiner, CallersArrivingMeanwhileShareOneGroupInArrivalOrder) {
  fake_sender fake;
  auto c = fake.make(10, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c", "d"});
  for (auto& w : waiting)
    EXPECT_EQ(w->outcome.get().msg_id, w->name.at(0));
  using groups = std::vector<std::vector<std::string>>;
  EXPECT_EQ(fake.groups(), (groups{{"b", "c", "d"}}));
  EXPECT_EQ(fake.alone(), std::vector<std::string>{"a"});
}

TEST(SendCombiner, GroupsHoldAtMostMaxGroupSize) {
  fake_sender fake;
  auto c = fake.make(2, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c", "d"});
  for (auto& w : waiting)
    EXPECT_EQ(w->outcome.get().msg_id, w->name.at(0));
  // The rest after a full group is one command: sent alone.
  using groups = std::vector<std::vector<std::string>>;
  EXPECT_EQ(fake.groups(), (groups{{"b", "c"}}));
  EXPECT_EQ(fake.alone(), (std::vector<std::string>{"a", "d"}));
}

TEST(SendCombiner, AFurtherGroupStartsOnlyForTwoOrMore) {
  fake_sender fake;
  auto c = fake.make(10, 2);
  auto a = busy_leader(fake, c);
  // One waiting caller does not start a second transaction...
  auto b = queue_callers(c, {"b"});
  EXPECT_EQ(fake.alone().size(), 1u);
  // ...two do, while the first is still in flight.
  caller more{c, "c"};
  using groups = std::vector<std::vector<std::string>>;
  EXPECT_TRUE(test::eventually([&] { return !fake.groups().empty(); }));
  EXPECT_EQ(fake.groups(), (groups{{"b", "c"}}));
  EXPECT_EQ(b.front()->outcome.get().msg_id, 'b');
  EXPECT_EQ(more.outcome.get().msg_id, 'c');
  fake.release();
  EXPECT_EQ(a->outcome.get().msg_id, 'a');
}

TEST(SendCombiner, AFailedMemberFailsOnlyItsCaller) {
  fake_sender fake;
  auto missing = uuid::random();
  fake.on_together = [&](const db::send_combiner::group& g) {
    for (auto& member : g)
      if (member->item.command_type == "c")
        member->error = std::make_exception_ptr(
          batch_not_found_error(member->item.domain, missing));
  };
  auto c = fake.make(10, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c", "d"});
  EXPECT_EQ(waiting[0]->outcome.get().msg_id, 'b');
  try {
    waiting[1]->outcome.get();
    ADD_FAILURE() << "c did not fail";
  } catch (const batch_not_found_error& e) {
    EXPECT_EQ(e.batch_id(), missing);
  }
  EXPECT_EQ(waiting[2]->outcome.get().msg_id, 'd');
  // Nothing was sent again.
  EXPECT_EQ(fake.alone(), std::vector<std::string>{"a"});
}

TEST(SendCombiner, AFailedTransactionIsRetriedCommandByCommand) {
  fake_sender fake;
  fake.on_together = [](const db::send_combiner::group&) {
    throw db::error{db::errc::unique_violation, "23505", "duplicate key"};
  };
  fake.on_alone = [](const db::prepared_command& p) {
    if (p.command_type == "c")
      throw duplicate_command_error(p.domain, p.command_id);
  };
  auto c = fake.make(10, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c", "d"});
  EXPECT_EQ(waiting[0]->outcome.get().msg_id, 'b');
  EXPECT_THROW(waiting[1]->outcome.get(), duplicate_command_error);
  EXPECT_EQ(waiting[2]->outcome.get().msg_id, 'd');
  EXPECT_EQ(fake.alone(), (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(SendCombiner, ABrokenConnectionFailsTheWholeGroup) {
  fake_sender fake;
  fake.on_together = [](const db::send_combiner::group&) {
    throw db::error{db::errc::connection, "", "connection lost"};
  };
  auto c = fake.make(10, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c"});
  for (auto& w : waiting) {
    try {
      w->outcome.get();
      ADD_FAILURE() << w->name << " did not fail";
    } catch (const db::error& e) {
      EXPECT_EQ(e.code(), db::errc::connection);
    }
  }
  EXPECT_EQ(fake.alone(), std::vector<std::string>{"a"});
}

TEST(SendCombiner, AnyOtherFailureFailsTheWholeGroup) {
  fake_sender fake;
  fake.on_together = [](const db::send_combiner::group&) {
    throw std::runtime_error("pool exhausted");
  };
  auto c = fake.make(10, 1);
  auto waiting = queue_behind_leader(fake, c, {"b", "c"});
  for (auto& w : waiting)
    EXPECT_THROW(w->outcome.get(), std::runtime_error);
  EXPECT_EQ(fake.alone(), std::vector<std::string>{"a"});
}
