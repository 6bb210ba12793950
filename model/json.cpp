#include "cmdbus/model/json.hpp"

#include <algorithm>
#include <limits>

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/detail/json_reader.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus {

namespace detail {

namespace {

using rapidjson::SizeType;

using compact_writer = rapidjson::Writer<rapidjson::StringBuffer>;

/// RapidJSON flags: no recursion, validate UTF-8 inside strings, keep numbers
/// as their source text (no precision loss, no "1.0" -> "1" rewrites). All
/// other flags stay off: no comments, NaN/Infinity or trailing commas, and
/// anything but whitespace after the value is an error.
constexpr unsigned parse_flags = rapidjson::kParseIterativeFlag
                                 | rapidjson::kParseValidateEncodingFlag
                                 | rapidjson::kParseNumbersAsStringsFlag;

constexpr const char* lone_surrogate = "lone surrogate in \\u escape";

/// SAX handler: re-serialises compactly, enforces the depth limit and the
/// string rules, and records the members of a top-level object.
class handler {
public:
  handler(size_t max_depth, std::initializer_list<std::string_view> wanted)
    : writer_(buffer_), max_depth_(max_depth), wanted_(wanted) {
    // Never reallocates, so `current_` stays valid.
    members_.reserve(wanted.size());
  }

  bool Null() {
    before_value(json_type::null);
    writer_.Null();
    return after_scalar();
  }

  bool Bool(bool x) {
    before_value(json_type::boolean);
    writer_.Bool(x);
    return after_scalar();
  }

  // Unused with kParseNumbersAsStringsFlag (RawNumber gets every number).
  bool Int(int) {
    return false;
  }
  bool Uint(unsigned) {
    return false;
  }
  bool Int64(int64_t) {
    return false;
  }
  bool Uint64(uint64_t) {
    return false;
  }
  bool Double(double) {
    return false;
  }

  bool RawNumber(const char* str, SizeType len, bool) {
    before_value(json_type::number);
    // Writer::RawNumber of RapidJSON 1.1 quotes its input; RawValue does not.
    writer_.RawValue(str, len, rapidjson::kNumberType);
    return after_scalar();
  }

  bool String(const char* str, SizeType len, bool) {
    if (!check_string(str, len))
      return false;
    if (depth_ == 1 && current_ != nullptr)
      current_->string_value.assign(str, len);
    before_value(json_type::string);
    writer_.String(str, len);
    return after_scalar();
  }

  bool Key(const char* str, SizeType len, bool) {
    if (!check_string(str, len))
      return false;
    writer_.Key(str, len);
    if (depth_ == 1)
      current_ = member_for({str, len});
    return true;
  }

  bool StartObject() {
    return start(json_type::object) && writer_.StartObject();
  }

  bool EndObject(SizeType) {
    writer_.EndObject();
    return end();
  }

  bool StartArray() {
    return start(json_type::array) && writer_.StartArray();
  }

  bool EndArray(SizeType) {
    writer_.EndArray();
    return end();
  }

  /// The reason for the last `false` returned to RapidJSON.
  const std::string& error() const noexcept {
    return error_;
  }

  /// Whether parsing stopped at the depth limit.
  bool too_deep() const noexcept {
    return too_deep_;
  }

  json_type root_type() const noexcept {
    return root_type_;
  }

  std::vector<json_member>& members() noexcept {
    return members_;
  }

  std::string text() const {
    return std::string{buffer_.GetString(), buffer_.GetSize()};
  }

private:
  /// Returns the record for top-level key `key` if it is wanted (reused
  /// for duplicates: the last one wins), else nullptr. Only wanted keys are
  /// recorded, so memory stays bounded whatever the input.
  json_member* member_for(std::string_view key) {
    if (std::find(wanted_.begin(), wanted_.end(), key) == wanted_.end())
      return nullptr;
    auto i = std::find_if(members_.begin(), members_.end(),
                          [key](const json_member& m) { return m.key == key; });
    if (i == members_.end()) {
      members_.emplace_back();
      members_.back().key = key;
      return &members_.back();
    }
    *i = json_member{};
    i->key = key;
    return &*i;
  }

  /// Records the start of a value: the root's type, or a member's range
  /// (the writer puts ':' before a member value, hence the + 1).
  void before_value(json_type type) {
    if (depth_ == 0) {
      root_type_ = type;
    } else if (depth_ == 1 && current_ != nullptr) {
      current_->type = type;
      current_->begin = buffer_.GetSize() + 1;
    }
  }

  bool after_scalar() {
    if (depth_ == 1 && current_ != nullptr)
      current_->end = buffer_.GetSize();
    return true;
  }

  bool start(json_type type) {
    if (depth_ >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    before_value(type);
    ++depth_;
    return true;
  }

  bool end() {
    --depth_;
    if (depth_ == 1 && current_ != nullptr)
      current_->end = buffer_.GetSize();
    return true;
  }

  /// Rejects what survives RapidJSON's checks but is not storable: lone
  /// surrogates written as escapes (RapidJSON 1.1 encodes "\udc00" as
  /// CESU bytes) and U+0000 (PostgreSQL's jsonb rejects "\u0000").
  bool check_string(const char* str, SizeType len) {
    std::string_view x{str, len};
    if (x.find('\0') != std::string_view::npos) {
      error_ = "string contains \\u0000, which PostgreSQL jsonb cannot store";
      return false;
    }
    if (!is_valid_utf8(x)) {
      error_ = lone_surrogate;
      return false;
    }
    return true;
  }

  rapidjson::StringBuffer buffer_;
  compact_writer writer_;
  size_t max_depth_;
  std::initializer_list<std::string_view> wanted_;
  size_t depth_ = 0;
  bool too_deep_ = false;
  json_type root_type_ = json_type::null;
  std::vector<json_member> members_;
  /// The wanted top-level member whose value comes next, if any.
  json_member* current_ = nullptr;
  std::string error_;
};

/// Returns RapidJSON's English message without the trailing period.
std::string rapidjson_message(rapidjson::ParseErrorCode code) {
  std::string msg = rapidjson::GetParseError_En(code);
  if (!msg.empty() && msg.back() == '.')
    msg.pop_back();
  return msg;
}

[[noreturn]] void fail_at(size_t offset, const std::string& what) {
  throw decode_error("invalid JSON at offset " + std::to_string(offset) + ": "
                     + what);
}

} // namespace

const char* describe(json_type x) noexcept {
  switch (x) {
    case json_type::null: return "null";
    case json_type::boolean: return "a boolean";
    case json_type::number: return "a number";
    case json_type::string: return "a string";
    case json_type::object: return "an object";
    case json_type::array: return "an array";
  }
  return "a value";
}

const json_member* parsed_json::find(std::string_view key) const noexcept {
  for (const auto& m : members)
    if (m.key == key)
      return &m;
  return nullptr;
}

std::string_view
parsed_json::value_text(const json_member& member) const& noexcept {
  return std::string_view{text}.substr(member.begin, member.end - member.begin);
}

parsed_json parse_json(std::string_view input, const decode_limits& limits,
                       std::initializer_list<std::string_view> wanted) {
  // RapidJSON sizes strings with 32 bits; nothing near that is accepted.
  constexpr size_t hard_max = std::numeric_limits<SizeType>::max() / 2;
  if (input.size() > limits.max_bytes || input.size() > hard_max) {
    auto n = limits.max_bytes < hard_max ? limits.max_bytes : hard_max;
    throw decode_error("message larger than " + std::to_string(n) + " bytes");
  }
  if (input.empty())
    throw decode_error("empty input");
  // RapidJSON's streams treat a NUL byte as the end of input, which would
  // hide anything after it. Valid JSON never contains a raw NUL byte.
  if (auto pos = input.find('\0'); pos != std::string_view::npos)
    fail_at(pos, "NUL byte");
  handler h{limits.max_depth, wanted};
  rapidjson::MemoryStream stream{input.data(), input.size()};
  rapidjson::Reader reader;
  auto result = reader.Parse<parse_flags>(stream, h);
  if (result.IsError()) {
    auto offset = result.Offset();
    switch (result.Code()) {
      case rapidjson::kParseErrorTermination:
        if (h.too_deep())
          throw decode_error("nesting deeper than "
                             + std::to_string(limits.max_depth) + " levels");
        fail_at(offset, h.error());
      case rapidjson::kParseErrorStringUnicodeSurrogateInvalid:
        fail_at(offset, lone_surrogate);
      case rapidjson::kParseErrorStringInvalidEncoding:
        throw decode_error("invalid UTF-8 at offset " + std::to_string(offset));
      case rapidjson::kParseErrorStringEscapeInvalid:
        if (offset < input.size()
            && static_cast<unsigned char>(input[offset]) < 0x20)
          fail_at(offset, "unescaped control character in string");
        fail_at(offset, rapidjson_message(result.Code()));
      default: fail_at(offset, rapidjson_message(result.Code()));
    }
  }
  parsed_json out;
  out.text = h.text();
  out.type = h.root_type();
  if (out.type == json_type::object)
    out.members = std::move(h.members());
  return out;
}

// Returns the length of the valid UTF-8 sequence at [p, end), or 0.
size_t utf8_sequence(const unsigned char* p,
                     const unsigned char* end) noexcept {
  auto c = *p;
  if (c < 0x80)
    return 1;
  size_t n;
  unsigned char lo = 0x80;
  unsigned char hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 2;
    if (c == 0xe0)
      lo = 0xa0; // no overlong forms
    else if (c == 0xed)
      hi = 0x9f; // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 3;
    if (c == 0xf0)
      lo = 0x90; // no overlong forms
    else if (c == 0xf4)
      hi = 0x8f; // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) <= n)
    return 0;
  if (p[1] < lo || p[1] > hi)
    return 0;
  for (size_t i = 2; i <= n; ++i)
    if (p[i] < 0x80 || p[i] > 0xbf)
      return 0;
  return n + 1;
}

bool is_valid_utf8(std::string_view x) noexcept {
  auto p = reinterpret_cast<const unsigned char*>(x.data());
  auto end = p + x.size();
  while (p != end) {
    auto n = utf8_sequence(p, end);
    if (n == 0)
      return false;
    p += n;
  }
  return true;
}

std::string quote_excerpt(std::string_view x) {
  constexpr size_t max_len = 40;
  bool cut = false;
  if (x.size() > max_len) {
    size_t n = max_len;
    // Do not split a multi-byte character.
    while (n > 0 && (static_cast<unsigned char>(x[n]) & 0xc0) == 0x80)
      --n;
    x = x.substr(0, n);
    cut = true;
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : x) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 0x0f];
    } else {
      out += ch;
    }
  }
  out += '"';
  if (cut)
    out += "...";
  return out;
}

} // namespace detail

std::string to_valid_text(std::string_view x) {
  static constexpr std::string_view replacement = "\xef\xbf\xbd"; // U+FFFD
  std::string out;
  out.reserve(x.size());
  auto p = reinterpret_cast<const unsigned char*>(x.data());
  auto end = p + x.size();
  while (p != end) {
    auto n = detail::utf8_sequence(p, end);
    if (n == 0 || *p == 0) {
      out += replacement;
      ++p;
      continue;
    }
    out.append(reinterpret_cast<const char*>(p), n);
    p += n;
  }
  return out;
}

json json::parse(std::string_view text, const decode_limits& limits) {
  auto parsed = detail::parse_json(text, limits, {});
  return json{std::move(parsed.text), trusted};
}

} // namespace cmdbus
