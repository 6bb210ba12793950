#include "cmdbus/model/uuid.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>

#include <sys/random.h>

namespace cmdbus {

namespace {

/// Positions of the dashes in the canonical form.
constexpr bool is_dash_position(size_t i) noexcept {
  return i == 8 || i == 13 || i == 18 || i == 23;
}

/// Returns the value of a hex digit, or -1.
int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// Fills `buf` from the kernel's CSPRNG (getrandom(2), no buffering, so
/// forked processes never share random state).
void fill_random(uint8_t* buf, size_t len) {
  while (len > 0) {
    auto n = ::getrandom(buf, len, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

} // namespace

std::optional<uuid> uuid::parse(std::string_view text) noexcept {
  if (text.size() != 36)
    return std::nullopt;
  uuid result;
  size_t out = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (is_dash_position(i)) {
      if (text[i] != '-')
        return std::nullopt;
      continue;
    }
    auto hi = hex_value(text[i]);
    auto lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    result.bytes_[out++] = static_cast<uint8_t>(hi << 4 | lo);
    ++i;
  }
  return result;
}

uuid uuid::random() {
  uuid result;
  fill_random(result.bytes_.data(), result.bytes_.size());
  result.bytes_[6] = static_cast<uint8_t>((result.bytes_[6] & 0x0f) | 0x40);
  result.bytes_[8] = static_cast<uint8_t>((result.bytes_[8] & 0x3f) | 0x80);
  return result;
}

std::string uuid::to_string() const {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out += '-';
    out += hex[bytes_[i] >> 4];
    out += hex[bytes_[i] & 0x0f];
  }
  return out;
}

bool uuid::is_nil() const noexcept {
  for (auto b : bytes_)
    if (b != 0)
      return false;
  return true;
}

} // namespace cmdbus

size_t
std::hash<cmdbus::uuid>::operator()(const cmdbus::uuid& x) const noexcept {
  uint64_t hi = 0;
  uint64_t lo = 0;
  std::memcpy(&hi, x.bytes().data(), 8);
  std::memcpy(&lo, x.bytes().data() + 8, 8);
  // Mix both halves so that non-random UUIDs (e.g. sequential ones) spread.
  uint64_t h = hi * 0x9e3779b97f4a7c15ULL ^ (lo + 0x7f4a7c159e3779b9ULL);
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}
