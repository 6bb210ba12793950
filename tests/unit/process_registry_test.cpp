// The process registry alone: the reply queue of each process type (the
// domain's shared queue by default, or a queue of its own), the queues a
// worker reads per domain, and the names it refuses.

#include "cmdbus/process/registry.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "tests/unit/process_workflow_fixture.hpp"

using namespace cmdbus;

namespace {

using strings = std::vector<std::string>;

std::shared_ptr<const workflow> order() {
  return {std::shared_ptr<void>{}, &process_test::order_workflow()};
}

TEST(process_registry, a_type_answers_on_the_shared_queue_by_default) {
  process_registry r;
  r.add("orders", order());
  EXPECT_EQ(r.reply_queue("orders", "OrderFulfilment"),
            "orders__process_replies");
  EXPECT_EQ(r.reply_queues("orders"), strings{"orders__process_replies"});
}

TEST(process_registry, a_type_may_have_a_reply_queue_of_its_own) {
  process_registry r;
  r.add("orders", order(), {"orders__fulfilment"});
  r.add("shop", order());
  EXPECT_EQ(r.reply_queue("orders", "OrderFulfilment"), "orders__fulfilment");
  EXPECT_EQ(r.reply_queue("shop", "OrderFulfilment"), "shop__process_replies");
  // A worker reads the shared queue too: processes started before the type
  // got its own queue still answer there.
  EXPECT_EQ(r.reply_queues("orders"),
            (strings{"orders__fulfilment", "orders__process_replies"}));
  EXPECT_EQ(r.reply_queues("shop"), strings{"shop__process_replies"});
}

TEST(process_registry, refuses_an_invalid_reply_queue_and_unknown_types) {
  process_registry r;
  EXPECT_THROW(r.add("orders", order(), {"no-hyphens"}), db::invalid_argument);
  EXPECT_THROW(r.add("orders", order(), {std::string(48, 'q')}),
               db::invalid_argument);
  EXPECT_TRUE(r.empty());
  r.add("orders", order());
  EXPECT_THROW(r.reply_queue("orders", "Other"), std::out_of_range);
  EXPECT_THROW(r.reply_queue("shop", "OrderFulfilment"), std::out_of_range);
}

} // namespace
