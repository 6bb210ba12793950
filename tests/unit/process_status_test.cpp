// Process statuses: the reference's stored strings, parsing and which ones
// are terminal.

#include "cmdbus/process/status.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cmdbus;

namespace {

const std::vector<std::pair<process_status, std::string>> all{
  {process_status::pending, "PENDING"},
  {process_status::in_progress, "IN_PROGRESS"},
  {process_status::waiting, "WAITING"},
  {process_status::waiting_for_tsq, "WAITING_FOR_TSQ"},
  {process_status::compensating, "COMPENSATING"},
  {process_status::completed, "COMPLETED"},
  {process_status::compensated, "COMPENSATED"},
  {process_status::failed, "FAILED"},
  {process_status::canceled, "CANCELED"},
};

TEST(process_status, stores_the_reference_strings) {
  for (auto& [status, name] : all) {
    EXPECT_EQ(to_string(status), name);
    EXPECT_EQ(parse_process_status(name), status) << name;
  }
}

TEST(process_status, waiting_for_a_reply_is_stored_as_waiting) {
  EXPECT_EQ(to_string(process_status::waiting), "WAITING");
  // The Java port's string is not ours.
  EXPECT_FALSE(parse_process_status("WAITING_FOR_REPLY"));
}

TEST(process_status, parsing_is_exact) {
  for (auto text : {"waiting", "Completed", "", " FAILED", "CANCELLED"})
    EXPECT_FALSE(parse_process_status(text)) << text;
}

TEST(process_status, terminal_statuses) {
  for (auto& [status, name] : all) {
    bool terminal = name == "COMPLETED" || name == "COMPENSATED"
                    || name == "FAILED" || name == "CANCELED";
    EXPECT_EQ(is_terminal(status), terminal) << name;
  }
}

} // namespace
