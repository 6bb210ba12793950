#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cmdbus {

/// A 128-bit UUID. Text form: 36 characters, lower-case hex, 8-4-4-4-12.
class uuid {
public:
  /// Constructs the nil UUID.
  uuid() = default;

  /// Parses the canonical 36-character form (hex digits in either case).
  /// Returns `std::nullopt` for anything else.
  static std::optional<uuid> parse(std::string_view text) noexcept;

  /// Returns a random (version 4) UUID.
  static uuid random();

  /// Returns the lower-case canonical text form.
  std::string to_string() const;

  /// Returns whether all bits are zero.
  bool is_nil() const noexcept;

  /// Returns the raw bytes (network order).
  const std::array<uint8_t, 16>& bytes() const noexcept {
    return bytes_;
  }

  friend bool operator==(const uuid& a, const uuid& b) noexcept {
    return a.bytes_ == b.bytes_;
  }
  friend bool operator!=(const uuid& a, const uuid& b) noexcept {
    return !(a == b);
  }
  friend bool operator<(const uuid& a, const uuid& b) noexcept {
    return a.bytes_ < b.bytes_;
  }

private:
  std::array<uint8_t, 16> bytes_{};
};

} // namespace cmdbus

template <>
struct std::hash<cmdbus::uuid> {
  size_t operator()(const cmdbus::uuid& x) const noexcept;
};
