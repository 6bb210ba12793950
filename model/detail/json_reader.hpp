#pragma once

// Internal to the model library: the strict JSON reader shared by
// `json::parse` and the wire codecs. Not part of the public contract.

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "cmdbus/model/json.hpp"

namespace cmdbus::detail {

/// The type of a JSON value.
enum class json_type { null, boolean, number, string, object, array };

/// Returns "null", "a boolean", "a number", "a string", "an object" or
/// "an array" (for error messages).
const char* describe(json_type x) noexcept;

/// A member of the top-level object of a parsed document.
struct json_member {
  std::string key;
  json_type type = json_type::null;
  /// The decoded value when `type == json_type::string`.
  std::string string_value;
  /// Byte range of the member's compact value text in `parsed_json::text`.
  size_t begin = 0;
  size_t end = 0;
};

/// The result of `parse_json`.
struct parsed_json {
  /// Compact re-serialisation of the input (numbers keep their exact text).
  std::string text;
  /// Type of the top-level value.
  json_type type = json_type::null;
  /// The wanted members of the top-level object, one per key: for a
  /// duplicate key the last one wins, like Python's json module and
  /// PostgreSQL's jsonb.
  std::vector<json_member> members;

  /// Returns the member named `key`, or nullptr.
  const json_member* find(std::string_view key) const noexcept;

  /// Returns the compact JSON text of `member`'s value, a view into `text`
  /// (so not available on a temporary).
  std::string_view value_text(const json_member& member) const& noexcept;
  std::string_view value_text(const json_member& member) const&& = delete;
};

/// Parses untrusted `input` strictly: RFC 8259 JSON (no comments, NaN,
/// Infinity or trailing commas), one value with nothing but whitespace after
/// it, valid UTF-8 also after unescaping (no lone surrogates), no U+0000
/// (PostgreSQL's jsonb cannot store it), at most `limits.max_bytes` bytes and
/// `limits.max_depth` levels of nesting. Never recurses: RapidJSON's
/// iterative parser with a SAX handler that counts depth. Throws
/// `decode_error` on any violation. Records the top-level members whose
/// keys are in `wanted` (only those, so that memory stays bounded).
parsed_json parse_json(std::string_view input, const decode_limits& limits,
                       std::initializer_list<std::string_view> wanted);

/// Returns whether `x` is valid UTF-8: shortest form, no surrogates
/// (U+D800..U+DFFF), nothing above U+10FFFF.
bool is_valid_utf8(std::string_view x) noexcept;

/// Returns `x` as a JSON string literal for error messages, cut after about
/// 40 bytes (at a character boundary) with "..." appended.
std::string quote_excerpt(std::string_view x);

} // namespace cmdbus::detail
