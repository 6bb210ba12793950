#include "cmdbus/actors/worker/credit_ledger.hpp"

#include <algorithm>

namespace cmdbus::actors {

bool credit_ledger::freed(int64_t n) noexcept {
  auto pay = std::min(debt_, n);
  debt_ -= pay;
  pending_ += n - pay;
  return n - pay > 0;
}

int64_t credit_ledger::release(int64_t room) noexcept {
  ++epoch_;
  auto n = std::min(pending_, room);
  withheld_ = n < pending_;
  if (n <= 0)
    return 0;
  pending_ -= n;
  return n;
}

void credit_ledger::shrunk(int64_t n) noexcept {
  auto from_pending = std::min(pending_, n);
  pending_ -= from_pending;
  debt_ += n - from_pending;
}

void credit_ledger::pool_dropped(int64_t slots, int64_t dropped) noexcept {
  shrunk(slots - dropped);
}

} // namespace cmdbus::actors
