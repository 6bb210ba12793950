#include "cmdbus/model/wire.hpp"

#include <charconv>
#include <limits>
#include <stdexcept>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/model/detail/json_reader.hpp"

// Encoding writes compact JSON: `{"domain":"payments",...}`. The reference
// (Python's json.dumps) writes `{"domain": "payments", ...}` with spaces and
// escapes non-ASCII characters as \uXXXX, whereas we write raw UTF-8. Both are
// the same JSON value, and PGMQ stores messages as jsonb, which keeps neither
// whitespace nor escapes, so readers on either side see identical messages.
//
// Decoding is strict about the envelope and lenient about unknown keys.
// Duplicate keys are accepted and the last one wins, like Python's json
// module and PostgreSQL's jsonb. Duplicates inside payloads stay in the
// payload text and resolve the same way when the payload is read.

namespace cmdbus::wire {

namespace {

using detail::json_member;
using detail::json_type;
using detail::parsed_json;

/// Builds a compact JSON object; validates strings that come from callers.
class encoder {
public:
  encoder() : writer_(buffer_) {
    writer_.StartObject();
  }

  /// Writes the key `name`.
  encoder& key(std::string_view name) {
    writer_.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
    return *this;
  }

  /// Writes a string value. Throws `std::invalid_argument` unless it is valid
  /// UTF-8 (`field` names it in the message).
  void string(std::string_view field, std::string_view x) {
    if (x.size() > std::numeric_limits<rapidjson::SizeType>::max() / 2
        || !detail::is_valid_utf8(x))
      throw std::invalid_argument("cannot encode field \"" + std::string{field}
                                  + "\": not valid UTF-8");
    writer_.String(x.data(), static_cast<rapidjson::SizeType>(x.size()));
  }

  /// Writes `"name":"x"`.
  void string_member(std::string_view name, std::string_view x) {
    key(name).string(name, x);
  }

  /// Writes `"name":"x"`, or `"name":null` when unset.
  void nullable_string_member(std::string_view name,
                              const std::optional<std::string>& x) {
    key(name);
    if (x)
      string(name, *x);
    else
      writer_.Null();
  }

  /// Writes `"name":"<uuid>"`.
  void uuid_member(std::string_view name, const uuid& x) {
    auto text = x.to_string();
    key(name);
    writer_.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  }

  /// Writes `"name":"<uuid>"`, or `"name":null` when unset.
  void nullable_uuid_member(std::string_view name,
                            const std::optional<uuid>& x) {
    if (x) {
      uuid_member(name, *x);
    } else {
      key(name);
      writer_.Null();
    }
  }

  /// Writes `"name":<integer>`.
  void int64_member(std::string_view name, int64_t x) {
    key(name);
    writer_.Int64(x);
  }

  /// Writes `"name":<json>`, embedding the validated text as is.
  void value_member(std::string_view name, const json& x) {
    key(name);
    raw(x);
  }

  /// Writes `"name":"x"` only when `x` is set.
  void string_member_if_set(std::string_view name,
                            const std::optional<std::string>& x) {
    if (x)
      string_member(name, *x);
  }

  /// Writes a JSON value (already validated compact text) without parsing.
  void raw(const json& x) {
    const auto& text = x.text();
    if (text.empty())
      writer_.Null();
    else
      writer_.RawValue(text.data(), text.size(), rapidjson::kObjectType);
  }

  void start_object() {
    writer_.StartObject();
  }

  void end_object() {
    writer_.EndObject();
  }

  /// Closes the top-level object and returns the text.
  std::string finish() {
    writer_.EndObject();
    return std::string{buffer_.GetString(), buffer_.GetSize()};
  }

private:
  rapidjson::StringBuffer buffer_;
  rapidjson::Writer<rapidjson::StringBuffer> writer_;
};

std::string quoted(std::string_view name) {
  return "\"" + std::string{name} + "\"";
}

/// The members of a decoded top-level object, with typed accessors that
/// throw `decode_error`.
class fields {
public:
  fields(std::string_view text, const decode_limits& limits,
         std::initializer_list<std::string_view> keys)
    : doc_(detail::parse_json(text, limits, keys)) {
    if (doc_.type != json_type::object)
      throw decode_error(std::string{"message must be a JSON object, not "}
                         + detail::describe(doc_.type));
  }

  const json_member* find(std::string_view name) const noexcept {
    return doc_.find(name);
  }

  /// Returns the value of `m` as a `json`.
  json value(const json_member& m) const {
    return json{std::string{doc_.value_text(m)}, json::trusted};
  }

  const std::string& required_string(std::string_view name) const {
    auto m = find(name);
    if (m == nullptr)
      throw decode_error("missing field " + quoted(name));
    if (m->type != json_type::string)
      throw decode_error("field " + quoted(name) + " must be a string");
    return m->string_value;
  }

  std::optional<std::string> optional_string(std::string_view name) const {
    auto m = find(name);
    if (m == nullptr || m->type == json_type::null)
      return std::nullopt;
    if (m->type != json_type::string)
      throw decode_error("field " + quoted(name) + " must be a string or null");
    return m->string_value;
  }

  uuid required_uuid(std::string_view name) const {
    return to_uuid(name, required_string(name));
  }

  std::optional<uuid> optional_uuid(std::string_view name) const {
    auto text = optional_string(name);
    if (!text)
      return std::nullopt;
    return to_uuid(name, *text);
  }

  /// The member "priority" as an int, or std::nullopt when it is absent or
  /// not an integer in int's range: the field is advisory (the reference
  /// ignores it), so a sender's odd value never makes a command fail.
  std::optional<int> optional_priority() const {
    auto m = find("priority");
    if (m == nullptr || m->type != json_type::number)
      return std::nullopt;
    auto text = doc_.value_text(*m);
    int value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(),
                                     value);
    if (ec != std::errc{} || end != text.data() + text.size())
      return std::nullopt;
    return value;
  }

private:
  static uuid to_uuid(std::string_view name, const std::string& text) {
    auto x = uuid::parse(text);
    if (!x)
      throw decode_error("field " + quoted(name) + " is not a valid UUID: "
                         + detail::quote_excerpt(text));
    return *x;
  }

  parsed_json doc_;
};

} // namespace

std::string encode_command(const command& x) {
  if (!x.data.is_object())
    throw std::invalid_argument("cannot encode field \"data\": not a JSON "
                                "object");
  encoder out;
  out.string_member("domain", x.domain);
  out.string_member("command_type", x.command_type);
  out.uuid_member("command_id", x.command_id);
  out.nullable_uuid_member("correlation_id", x.correlation_id);
  out.value_member("data", x.data);
  out.string_member_if_set("reply_to", x.reply_to);
  if (x.priority)
    out.int64_member("priority", *x.priority);
  return out.finish();
}

std::string encode_sent_details(std::string_view command_type,
                                const std::optional<uuid>& correlation_id,
                                const std::optional<std::string>& reply_to,
                                int64_t msg_id,
                                const std::optional<uuid>& batch_id) {
  encoder out;
  out.string_member("command_type", command_type);
  out.nullable_uuid_member("correlation_id", correlation_id);
  out.nullable_string_member("reply_to", reply_to);
  out.int64_member("msg_id", msg_id);
  if (batch_id)
    out.uuid_member("batch_id", *batch_id);
  return out.finish();
}

command decode_command(std::string_view text, const decode_limits& limits) {
  fields in{text,
            limits,
            {"domain", "command_type", "command_id", "correlation_id", "data",
             "reply_to", "priority"}};
  command x;
  x.domain = in.required_string("domain");
  x.command_type = in.required_string("command_type");
  x.command_id = in.required_uuid("command_id");
  x.correlation_id = in.optional_uuid("correlation_id");
  if (auto data = in.find("data")) {
    if (data->type != json_type::object)
      throw decode_error("field \"data\" must be an object");
    x.data = in.value(*data);
  }
  x.reply_to = in.optional_string("reply_to");
  // The reference replies only when reply_to is truthy; '' means none.
  if (x.reply_to && x.reply_to->empty())
    x.reply_to.reset();
  x.priority = in.optional_priority();
  return x;
}

std::string encode_reply(const reply& x) {
  encoder out;
  out.uuid_member("command_id", x.command_id);
  out.nullable_uuid_member("correlation_id", x.correlation_id);
  out.string_member("outcome", to_string(x.outcome));
  switch (x.outcome) {
    case reply_outcome::success:
      out.value_member("result", x.result);
      out.string_member_if_set("error_code", x.error_code);
      out.string_member_if_set("error_message", x.error_message);
      out.string_member_if_set("reason", x.reason);
      break;
    case reply_outcome::failed:
      out.key("result").start_object();
      out.nullable_string_member("error_code", x.error_code);
      out.nullable_string_member("error_message", x.error_message);
      out.value_member("error_details",
                       x.result.is_object() ? x.result : json::object());
      out.end_object();
      out.nullable_string_member("error_code", x.error_code);
      out.nullable_string_member("error_message", x.error_message);
      out.string_member_if_set("reason", x.reason);
      break;
    case reply_outcome::canceled:
      out.nullable_string_member("reason", x.reason);
      if (!x.result.is_null())
        out.value_member("result", x.result);
      out.string_member_if_set("error_code", x.error_code);
      out.string_member_if_set("error_message", x.error_message);
      break;
  }
  return out.finish();
}

reply decode_reply(std::string_view text, const decode_limits& limits) {
  fields in{text,
            limits,
            {"command_id", "correlation_id", "outcome", "result", "data",
             "error_code", "error_message", "reason"}};
  reply x;
  x.command_id = in.required_uuid("command_id");
  x.correlation_id = in.optional_uuid("correlation_id");
  const auto& outcome = in.required_string("outcome");
  if (auto parsed = parse_reply_outcome(outcome))
    x.outcome = *parsed;
  else
    throw decode_error("field \"outcome\" must be \"SUCCESS\", \"FAILED\" or "
                       "\"CANCELED\", not "
                       + detail::quote_excerpt(outcome));
  x.error_code = in.optional_string("error_code");
  x.error_message = in.optional_string("error_message");
  x.reason = in.optional_string("reason");
  // `result`, or the alias `data` (the reference's Java port sends it) when
  // `result` is absent or null.
  auto result = in.find("result");
  if (result == nullptr || result->type == json_type::null)
    if (auto data = in.find("data"))
      result = data;
  if (x.outcome != reply_outcome::failed) {
    if (result != nullptr)
      x.result = in.value(*result);
    return x;
  }
  // FAILED: `result` holds the error details; `result` of the message is
  // {error_code, error_message, error_details} (the reference's form).
  x.result = json::object();
  if (result == nullptr || result->type != json_type::object)
    return x;
  auto nested = in.value(*result);
  auto inner = detail::parse_json(
    nested.text(), limits, {"error_code", "error_message", "error_details"});
  if (auto details = inner.find("error_details")) {
    if (details->type == json_type::object)
      x.result = json{std::string{inner.value_text(*details)}, json::trusted};
  } else {
    x.result = std::move(nested);
  }
  auto nested_string = [&inner](std::string_view name,
                                std::optional<std::string>& out) {
    if (out)
      return;
    if (auto m = inner.find(name); m && m->type == json_type::string)
      out = m->string_value;
  };
  nested_string("error_code", x.error_code);
  nested_string("error_message", x.error_message);
  return x;
}

} // namespace cmdbus::wire
