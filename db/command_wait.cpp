// command_bus::wait_for_final and send_and_wait: waiting for a command's
// final status by polling its row, without holding a connection between
// polls.

#include <algorithm>
#include <thread>

#include "cmdbus/db/command_bus.hpp"

namespace cmdbus {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

/// The first delay between two polls, the growth and the longest delay: a
/// command that a worker finishes at once is seen within a few
/// milliseconds, a long one costs at most two reads a second.
constexpr milliseconds first_delay{10};
constexpr milliseconds longest_delay{500};

} // namespace

bool is_final(command_status s) noexcept {
  return is_terminal(s) || s == command_status::in_troubleshooting_queue;
}

command_wait_result
command_bus::wait_for_final(const std::string& domain, const uuid& command_id,
                            milliseconds budget,
                            const std::function<bool()>& stop) {
  auto until = steady_clock::now() + std::max(budget, milliseconds{0});
  auto delay = first_delay;
  command_wait_result out;
  for (;;) {
    out.command = get_command(domain, command_id);
    if (!out.command || is_final(out.command->status)) {
      out.final = out.command.has_value();
      return out;
    }
    auto now = steady_clock::now();
    if (now >= until || (stop && stop()))
      return out;
    std::this_thread::sleep_for(
      std::min<steady_clock::duration>(delay, until - now));
    delay = std::min(longest_delay, delay * 3 / 2);
  }
}

command_wait_result command_bus::send_and_wait(const send_request& req,
                                               milliseconds budget) {
  auto until = steady_clock::now() + budget;
  auto sent = send(req);
  auto left = std::chrono::duration_cast<milliseconds>(until
                                                       - steady_clock::now());
  auto out = wait_for_final(req.domain, sent.command_id, left);
  out.sent = sent;
  return out;
}

} // namespace cmdbus
