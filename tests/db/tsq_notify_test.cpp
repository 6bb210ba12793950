// The operator actions' sends notify as every send does: a retry wakes the
// listeners of the domain's command queue, a cancel or complete those of
// the reply queue, at commit; a reply queue that no longer exists is
// created (as the worker's completion creates one); a failed action
// notifies nobody.

#include <chrono>
#include <string>
#include <vector>

#include "tests/db/tsq_support.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

class TsqNotify : public TsqTest {
protected:
  TsqNotify() : listener(connect()) {
    listener.listen(db::notify_channel(q));
    listener.listen(db::notify_channel(replies));
  }

  // The channels notified within 5 s (at least one), then those arriving
  // within another 100 ms.
  std::vector<std::string> notified() {
    auto got = listener.wait_for_notifications(5000ms);
    for (auto more = listener.wait_for_notifications(100ms); !more.empty();
         more = listener.wait_for_notifications(100ms))
      got.insert(got.end(), more.begin(), more.end());
    return got;
  }

  // Drops what parking the command notified.
  void drain() {
    while (!listener.wait_for_notifications(100ms).empty())
      ; // discard
  }

  db::connection listener;
};

} // namespace

TEST_F(TsqNotify, RetryNotifiesTheCommandQueue) {
  auto id = park();
  drain();
  tsq.retry(d, id, std::string{"alice"});
  EXPECT_EQ(notified(), std::vector<std::string>{db::notify_channel(q)});
}

TEST_F(TsqNotify, CancelNotifiesTheReplyQueue) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  drain();
  tsq.cancel(d, id, std::string{"r"});
  EXPECT_EQ(notified(), std::vector<std::string>{db::notify_channel(replies)});
  EXPECT_EQ(reply_messages().size(), 1u);
}

TEST_F(TsqNotify, CompleteCreatesAReplyQueueThatNoLongerExistsAndNotifiesIt) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  conn.query("SELECT pgmq.drop_queue($1)", replies);
  drain();
  tsq.complete(d, id, json::parse(R"({"ok":true})"));
  EXPECT_EQ(notified(), std::vector<std::string>{db::notify_channel(replies)});
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*)::text FROM pgmq.meta WHERE "
                   "queue_name = $1",
                   replies),
            opt_str{"1"});
  auto msgs = reply_messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_TRUE(jeq(conn, msgs[0], "{outcome}", R"("SUCCESS")"));
}

TEST_F(TsqNotify, AFailedActionNotifiesNobody) {
  park_spec spec;
  spec.reply_to = replies;
  auto id = park(spec);
  tsq.cancel(d, id, std::string{"r"});
  drain();
  EXPECT_THROW(tsq.cancel(d, id, std::string{"again"}), not_in_tsq_error);
  EXPECT_THROW(tsq.retry(d, id), not_in_tsq_error);
  EXPECT_TRUE(listener.wait_for_notifications(200ms).empty());
}
