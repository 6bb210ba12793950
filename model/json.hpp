#pragma once

#include <string>
#include <string_view>

namespace cmdbus {

/// Returns `x` as text PostgreSQL can store: each byte that does not start a
/// valid UTF-8 sequence, and each NUL, becomes U+FFFD.
std::string to_valid_text(std::string_view x);

/// Limits applied when decoding untrusted JSON.
struct decode_limits {
  /// Largest accepted input in bytes.
  size_t max_bytes = 16 * 1024 * 1024;
  /// Deepest accepted nesting of arrays/objects (the top level is depth 1).
  size_t max_depth = 64;
};

/// A JSON value kept as compact, validated JSON text (RapidJSON writer
/// output). Payloads travel as text: they are embedded into messages without
/// re-parsing.
class json {
public:
  /// Constructs `null`.
  json() : text_("null") {
    // nop
  }

  /// Parses and validates `text` (UTF-8, limits); throws `decode_error`.
  /// The stored text is the compact re-serialisation: numbers keep their
  /// exact text, duplicate keys stay. Also rejects what PostgreSQL's jsonb
  /// cannot store: \u0000 and lone surrogates.
  static json parse(std::string_view text, const decode_limits& limits = {});

  /// Returns an empty object `{}`.
  static json object() {
    return json{"{}", trusted};
  }

  /// Returns `null`.
  static json null() {
    return json{};
  }

  /// Returns the compact JSON text.
  const std::string& text() const noexcept {
    return text_;
  }

  /// Returns whether the value is `null`.
  bool is_null() const noexcept {
    return text_ == "null";
  }

  /// Returns whether the value is an object.
  bool is_object() const noexcept {
    return !text_.empty() && text_[0] == '{';
  }

  friend bool operator==(const json& a, const json& b) noexcept {
    return a.text_ == b.text_;
  }
  friend bool operator!=(const json& a, const json& b) noexcept {
    return !(a == b);
  }

  /// Tag for constructing from text that is known to be valid and compact
  /// (used by the codecs after they validated it themselves).
  struct trusted_t {};
  static constexpr trusted_t trusted{};
  json(std::string text, trusted_t) : text_(std::move(text)) {
    // nop
  }

private:
  std::string text_;
};

} // namespace cmdbus
