#include <gtest/gtest.h>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"

using namespace cmdbus;

TEST(QueueName, AcceptsPgmqSafeNames) {
  for (const char* name : {"payments__commands", "a", "Orders_1", "x_y_z",
                           "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstu"}) {
    EXPECT_EQ(db::queue_name_problem(name), "") << name;
    EXPECT_NO_THROW(db::validate_queue_name(name)) << name;
  }
}

TEST(QueueName, RejectsBadNamesWithClearErrors) {
  struct case_t {
    std::string name;
    std::string message;
  };
  std::vector<case_t> cases{
    {"", "invalid queue name \"\": is empty"},
    {std::string(48, 'q'),
     "invalid queue name \"" + std::string(48, 'q')
       + "\": is longer than 47 characters"},
    {"it's", "invalid queue name \"it's\": may contain only ASCII letters, "
             "digits and underscores"},
    {"a;drop table x", "invalid queue name \"a;drop table x\": may contain "
                       "only ASCII letters, digits and underscores"},
    {"q\"x", "invalid queue name \"q\\x22x\": may contain only ASCII letters, "
             "digits and underscores"},
    {"caf\xc3\xa9", "invalid queue name \"caf\\xc3\\xa9\": may contain only "
                    "ASCII letters, digits and underscores"},
    {"a-b", "invalid queue name \"a-b\": may contain only ASCII letters, "
            "digits and underscores"},
    {"a b", "invalid queue name \"a b\": may contain only ASCII letters, "
            "digits and underscores"},
    {std::string("a\0b", 3), "invalid queue name \"a\\x00b\": may contain "
                             "only ASCII letters, digits and underscores"},
  };
  for (auto& c : cases) {
    try {
      db::validate_queue_name(c.name);
      ADD_FAILURE() << "accepted " << c.name;
    } catch (const db::invalid_argument& e) {
      EXPECT_EQ(e.what(), c.message);
    }
  }
}

TEST(QueueName, DomainMustLeaveRoomForTheCommandsSuffix) {
  EXPECT_EQ(db::command_queue("payments"), "payments__commands");
  EXPECT_EQ(db::command_queue(std::string(37, 'd')),
            std::string(37, 'd') + "__commands");
  EXPECT_THROW(db::command_queue(std::string(38, 'd')), db::invalid_argument);
  EXPECT_THROW(db::command_queue("pay-ments"), db::invalid_argument);
  EXPECT_THROW(db::command_queue(""), db::invalid_argument);
}

TEST(QueueName, NotifyChannelFollowsTheReference) {
  EXPECT_EQ(db::notify_channel("payments__commands"),
            "pgmq_notify_payments__commands");
  EXPECT_THROW(db::notify_channel("x;y"), db::invalid_argument);
}

TEST(QueueName, TableNameIsPgmqsLowerCaseName) {
  EXPECT_EQ(db::queue_table("payments__commands"), "q_payments__commands");
  EXPECT_EQ(db::queue_table("Orders_1__Replies"), "q_orders_1__replies");
  EXPECT_THROW(db::queue_table("x\"; drop table y"), db::invalid_argument);
  EXPECT_THROW(db::queue_table(""), db::invalid_argument);
}
