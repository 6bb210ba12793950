// Durable batch-callback delivery (sql/commandbus/V005; docs/design.md, "Exact
// batch counters and callbacks"): recording through worker_store::finish,
// claiming with a lease, marking delivered, and what a crashed deliverer
// leaves behind.

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/worker_store.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;

namespace {

/// Inserts a recorded completion as the worker does (V005 table).
void record(db::connection& c, const std::string& domain, const uuid& id) {
  c.query("INSERT INTO commandbus.cmdbus_batch_delivery (domain, batch_id) "
          "VALUES ($1, $2::uuid)",
          domain, id.to_string());
}

/// delivered_at IS NOT NULL, attempts and claimed_until IS NOT NULL of a row.
struct row_state {
  bool delivered = false;
  int64_t attempts = -1;
  bool claimed = false;
};

std::optional<row_state> state_of(db::connection& c, const std::string& domain,
                                  const uuid& id) {
  auto r = c.query("SELECT delivered_at IS NOT NULL, attempts, claimed_until "
                   "IS NOT NULL FROM commandbus.cmdbus_batch_delivery WHERE "
                   "domain = $1 AND batch_id = $2::uuid",
                   domain, id.to_string());
  if (r.rows() == 0)
    return std::nullopt;
  return row_state{r.boolean(0, 0), r.int64(0, 1), r.boolean(0, 2)};
}

} // namespace

TEST(BatchDelivery, ClaimLeasesMarkDeliversOnce) {
  auto conn = test::connect();
  auto domain = test::unique_name("bd");
  db::worker_store store{conn, domain};
  auto a = uuid::random(), b = uuid::random();
  record(conn, domain, a);
  record(conn, domain, b);

  // A sweep claims both (oldest first), leased: a second claim gets none.
  auto first = store.claim_batch_deliveries(nullptr, 60, 100);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], a);
  EXPECT_EQ(first[1], b);
  EXPECT_TRUE(store.claim_batch_deliveries(nullptr, 60, 100).empty());
  EXPECT_TRUE(store.claim_batch_deliveries(&first, 60, 100).empty());
  EXPECT_EQ(state_of(conn, domain, a)->attempts, 1);
  EXPECT_TRUE(state_of(conn, domain, a)->claimed);

  // Delivered rows are never claimed again; marking twice changes nothing.
  EXPECT_EQ(store.mark_batches_delivered({a}), 1);
  EXPECT_EQ(store.mark_batches_delivered({a}), 0);
  auto sa = state_of(conn, domain, a);
  EXPECT_TRUE(sa->delivered);
  EXPECT_FALSE(sa->claimed);

  // An expired lease (the deliverer died before marking) is claimed again,
  // with the next attempt number; the delivered row stays out.
  conn.query("UPDATE commandbus.cmdbus_batch_delivery SET claimed_until = "
             "clock_timestamp() - interval '1 second' WHERE domain = $1",
             domain);
  auto again = store.claim_batch_deliveries(nullptr, 60, 100);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0], b);
  EXPECT_EQ(state_of(conn, domain, b)->attempts, 2);
}

// A claim that committed but whose answer the claimer never got (the
// connection dropped in between): the same claimer takes it again at once,
// by batch id or in a sweep; another claimer, or a claim without a token,
// still waits for the lease.
TEST(BatchDelivery, AClaimWhoseAnswerWasLostIsTakenAgainByItsClaimer) {
  auto conn = test::connect();
  auto domain = test::unique_name("bd");
  db::worker_store store{conn, domain};
  auto a = uuid::random();
  record(conn, domain, a);
  auto mine = uuid::random(), theirs = uuid::random();
  std::vector<uuid> ids{a};
  ASSERT_EQ(store.claim_batch_deliveries(&ids, 60, 100, mine).size(), 1u);
  EXPECT_TRUE(store.claim_batch_deliveries(&ids, 60, 100, theirs).empty());
  EXPECT_TRUE(store.claim_batch_deliveries(&ids, 60, 100).empty());
  EXPECT_TRUE(store.claim_batch_deliveries(nullptr, 60, 100, theirs).empty());
  auto again = store.claim_batch_deliveries(&ids, 60, 100, mine);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0], a);
  EXPECT_EQ(store.claim_batch_deliveries(nullptr, 60, 100, mine).size(), 1u);
  EXPECT_EQ(state_of(conn, domain, a)->attempts, 3);
  EXPECT_EQ(store.mark_batches_delivered({a}), 1);
  EXPECT_TRUE(store.claim_batch_deliveries(nullptr, 60, 100, mine).empty());
}

TEST(BatchDelivery, ClaimByIdsLimitAndDomainAreRespected) {
  auto conn = test::connect();
  auto domain = test::unique_name("bd");
  auto other = test::unique_name("bd");
  db::worker_store store{conn, domain};
  std::vector<uuid> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(uuid::random());
    record(conn, domain, ids.back());
  }
  record(conn, other, ids[0]);

  std::vector<uuid> wanted{ids[3], uuid::random()};
  auto by_id = store.claim_batch_deliveries(&wanted, 60, 100);
  ASSERT_EQ(by_id.size(), 1u);
  EXPECT_EQ(by_id[0], ids[3]);

  auto limited = store.claim_batch_deliveries(nullptr, 60, 2);
  EXPECT_EQ(limited.size(), 2u);
  auto rest = store.claim_batch_deliveries(nullptr, 60, 100);
  EXPECT_EQ(rest.size(), 2u);
  // The other domain's row is untouched.
  EXPECT_EQ(state_of(conn, other, ids[0])->attempts, 0);
}

TEST(BatchDelivery, RowsLockedByAConcurrentClaimAreSkipped) {
  auto conn = test::connect();
  auto other = test::connect();
  auto domain = test::unique_name("bd");
  auto a = uuid::random(), b = uuid::random();
  record(conn, domain, a);
  record(conn, domain, b);
  // Another session holds row a locked (e.g. its claim is in flight).
  other.exec("BEGIN");
  other.query("SELECT 1 FROM commandbus.cmdbus_batch_delivery WHERE domain = "
              "$1 AND batch_id = $2::uuid FOR UPDATE",
              domain, a.to_string());
  db::worker_store store{conn, domain};
  auto got = store.claim_batch_deliveries(nullptr, 60, 100);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], b);
  other.exec("ROLLBACK");
}

TEST(BatchDelivery, NegativeLeaseIsRejected) {
  auto conn = test::connect();
  db::worker_store store{conn, test::unique_name("bd")};
  try {
    store.claim_batch_deliveries(nullptr, -1, 10);
    FAIL() << "a negative lease was accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "22023");
  }
}

namespace {

/// A one-command batch in a new domain, received: ready to finish.
struct received_batch {
  std::string domain;
  uuid batch_id;
  db::finished_command done;
};

received_batch receive_one_batch(db::connection& conn) {
  db::pool_options popts;
  popts.dsn = test::dsn();
  db::pool pool{popts};
  command_bus bus{pool};
  received_batch out;
  out.domain = test::unique_name("bd");
  batch_command cmd;
  cmd.command_type = "T";
  cmd.command_id = uuid::random();
  out.batch_id = bus.create_batch(out.domain, {cmd}).batch_id;
  db::worker_store store{conn, out.domain};
  auto got = store.receive(30, 10);
  if (got.commands.size() != 1)
    throw std::runtime_error("expected one received command");
  out.done.rc = got.commands[0];
  out.done.out.kind = outcome_kind::success;
  return out;
}

} // namespace

TEST(BatchDelivery, FinishRecordsCompletedBatchesOnlyWhenAsked) {
  auto conn = test::connect();
  for (bool on : {false, true}) {
    auto b = receive_one_batch(conn);
    db::worker_store store{conn, b.domain};
    store.record_batch_completions(on);
    auto completed = store.finish({b.done}).completed_batches;
    ASSERT_EQ(completed.size(), 1u);
    EXPECT_EQ(completed[0], b.batch_id);
    auto st = state_of(conn, b.domain, b.batch_id);
    if (!on) {
      EXPECT_FALSE(st.has_value()) << "recorded without being asked";
      continue;
    }
    ASSERT_TRUE(st.has_value()) << "completion not recorded";
    EXPECT_FALSE(st->delivered);
    EXPECT_EQ(st->attempts, 0);
    EXPECT_FALSE(st->claimed);
  }
}

TEST(BatchDelivery, RecordRollsBackWithTheTransition) {
  // The record is part of the finish transaction: when that fails (here: a
  // reply queue name the SQL refuses), neither the transition nor the
  // record is written.
  auto conn = test::connect();
  auto b = receive_one_batch(conn);
  db::worker_store store{conn, b.domain};
  store.record_batch_completions(true);
  b.done.rc.cmd.reply_to = std::string{"bad name!"};
  EXPECT_THROW(store.finish({b.done}), db::error);
  EXPECT_FALSE(state_of(conn, b.domain, b.batch_id).has_value());
  EXPECT_EQ(conn
              .query("SELECT status FROM commandbus.command WHERE domain = $1",
                     b.domain)
              .opt_text(0, 0),
            "IN_PROGRESS");
}
