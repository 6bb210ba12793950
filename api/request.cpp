#include "api/request.hpp"

#include <charconv>
#include <cmath>
#include <memory>

#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"

namespace cmdbus::api {

namespace {

using std::chrono::milliseconds;

[[noreturn]] void bad(const std::string& message) {
  throw api_error{400, "invalid_request", message};
}

// -- a small tree of the body ------------------------------------------------

/// A value of the body. Objects and arrays keep their members (to the depth
/// the requests use) and their byte range in the body, so that a payload
/// is taken as the client wrote it (numbers keep their exact text).
struct node {
  enum kind { null, boolean, number, string, object, array } type = null;
  /// A string's decoded value, a number's text, "true"/"false".
  std::string text;
  size_t begin = 0;
  size_t end = 0;
  std::vector<std::pair<std::string, std::unique_ptr<node>>> members;
  std::vector<std::unique_ptr<node>> items;
};

const char* describe(node::kind k) {
  switch (k) {
    case node::null: return "null";
    case node::boolean: return "a boolean";
    case node::number: return "a number";
    case node::string: return "a string";
    case node::object: return "an object";
    case node::array: return "an array";
  }
  return "a value";
}

/// Builds the tree down to `keep_depth` levels (deeper values are only
/// skipped: their object or array ancestor has their text).
class tree_builder {
public:
  tree_builder(rapidjson::StringStream& in, size_t keep_depth)
    : in_(in), keep_depth_(keep_depth) {
    // nop
  }

  std::unique_ptr<node> root;

  bool Null() {
    return scalar(node::null, "");
  }
  bool Bool(bool b) {
    return scalar(node::boolean, b ? "true" : "false");
  }
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
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    return scalar(node::number, std::string{s, n});
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return scalar(node::string, std::string{s, n});
  }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (kept())
      key_.assign(s, n);
    return true;
  }
  bool StartObject() {
    return open(node::object);
  }
  bool EndObject(rapidjson::SizeType) {
    return close();
  }
  bool StartArray() {
    return open(node::array);
  }
  bool EndArray(rapidjson::SizeType) {
    return close();
  }

private:
  /// Whether the value being read is kept in the tree.
  bool kept() const {
    return depth_ <= keep_depth_ && depth_ == stack_.size();
  }

  node* add(node::kind type) {
    auto n = std::make_unique<node>();
    n->type = type;
    auto* raw = n.get();
    if (stack_.empty()) {
      root = std::move(n);
    } else if (stack_.back()->type == node::object) {
      stack_.back()->members.emplace_back(key_, std::move(n));
    } else {
      stack_.back()->items.push_back(std::move(n));
    }
    return raw;
  }

  bool scalar(node::kind type, std::string text) {
    if (kept())
      add(type)->text = std::move(text);
    return true;
  }

  bool open(node::kind type) {
    if (kept()) {
      auto* n = add(type);
      // The iterative reader calls before it takes the bracket.
      n->begin = in_.Tell();
      stack_.push_back(n);
    }
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (!stack_.empty() && depth_ == stack_.size() - 1) {
      stack_.back()->end = in_.Tell() + 1;
      stack_.pop_back();
    }
    return true;
  }

  rapidjson::StringStream& in_;
  size_t keep_depth_;
  size_t depth_ = 0;
  std::vector<node*> stack_;
  std::string key_;
};

/// Checks `body` as the messages' JSON is checked (size, depth, UTF-8, no
/// U+0000), then reads it into a tree kept to `keep_depth` levels.
std::unique_ptr<node> read_tree(std::string_view body, size_t keep_depth) {
  if (body.size() > max_body_bytes)
    throw api_error{413, "body_too_large",
                    "the body is larger than " + std::to_string(max_body_bytes)
                      + " bytes"};
  decode_limits limits;
  limits.max_bytes = max_body_bytes;
  limits.max_depth = 32;
  try {
    json::parse(body, limits);
  } catch (const decode_error& e) {
    bad(std::string{"the body is not valid JSON: "} + e.what());
  }
  std::string text{body};
  rapidjson::StringStream in{text.c_str()};
  tree_builder b{in, keep_depth};
  rapidjson::Reader reader;
  constexpr unsigned flags = rapidjson::kParseIterativeFlag
                             | rapidjson::kParseValidateEncodingFlag
                             | rapidjson::kParseNumbersAsStringsFlag;
  if (reader.Parse<flags>(in, b).IsError() || !b.root)
    bad("the body is not valid JSON");
  return std::move(b.root);
}

// -- fields ------------------------------------------------------------------

/// The members of an object, each at most once and each known.
class fields {
public:
  fields(const node& n, std::string_view what,
         const std::vector<std::string_view>& known)
    : what_(what) {
    if (n.type != node::object)
      bad(std::string{what} + " must be a JSON object, not "
          + describe(n.type));
    for (auto& [key, value] : n.members) {
      bool ok = false;
      for (auto k : known)
        ok = ok || k == key;
      if (!ok)
        bad(std::string{what} + " has an unknown field \"" + printable(key)
            + "\"");
      for (auto& [k, v] : seen_)
        if (k == key)
          bad(std::string{what} + " has the field \"" + key + "\" twice");
      seen_.emplace_back(key, value.get());
    }
  }

  const node* find(std::string_view key) const {
    for (auto& [k, v] : seen_)
      if (k == key)
        return v->type == node::null ? nullptr : v;
    return nullptr;
  }

  const node* of(std::string_view key, node::kind type) const {
    auto* n = find(key);
    if (n != nullptr && n->type != type)
      bad(field(key) + " must be " + describe(type) + ", not "
          + describe(n->type));
    return n;
  }

  std::optional<std::string> string(std::string_view key) const {
    if (auto* n = of(key, node::string))
      return n->text;
    return std::nullopt;
  }

  std::optional<uuid> id(std::string_view key) const {
    auto text = string(key);
    if (!text)
      return std::nullopt;
    auto x = uuid::parse(*text);
    if (!x)
      bad(field(key) + " is not a UUID");
    return x;
  }

  std::optional<int> integer(std::string_view key, int64_t min,
                             int64_t max) const {
    auto* n = of(key, node::number);
    if (n == nullptr)
      return std::nullopt;
    int64_t v = 0;
    auto& t = n->text;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size() || v < min || v > max)
      bad(field(key) + " must be an integer from " + std::to_string(min)
          + " to " + std::to_string(max));
    return static_cast<int>(v);
  }

  std::string field(std::string_view key) const {
    return "field \"" + std::string{key} + "\" of " + what_;
  }

  /// A name: printable ASCII and no more than 64 characters of it shown.
  static std::string printable(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 64))
      out += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
               ? static_cast<char>(c)
               : '?';
    return out;
  }

private:
  std::string what_;
  std::vector<std::pair<std::string, const node*>> seen_;
};

/// A duration: a number with unit ms, s, m or h (no unit: seconds).
std::optional<milliseconds> duration_of(std::string_view text) {
  double n = 0;
  size_t pos = 0;
  try {
    n = std::stod(std::string{text}, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  auto unit = text.substr(pos);
  double scale = unit.empty() || unit == "s" ? 1000
                 : unit == "ms"              ? 1
                 : unit == "m"               ? 60'000
                 : unit == "h"               ? 3'600'000
                                             : 0;
  if (scale == 0 || !std::isfinite(n) || n < 0 || n * scale > 1e13)
    return std::nullopt;
  return milliseconds{static_cast<int64_t>(std::llround(n * scale))};
}

const std::vector<std::string_view> command_fields{
  "type",         "data",       "command_id", "correlation_id", "reply_to",
  "max_attempts", "not_before", "delay",      "priority"};

/// The fields of one command (of a send body or a batch's element).
struct command_fields_read {
  std::string type;
  json data = json::object();
  std::optional<uuid> command_id;
  std::optional<uuid> correlation_id;
  std::optional<std::string> reply_to;
  std::optional<int> max_attempts;
  std::optional<timestamp> not_before;
  std::optional<int> priority;
  /// As given: the not_before time, or the delay.
  std::optional<timestamp> at;
  std::optional<milliseconds> delay;
};

/// What a command of a request decides (send_body::decided): the fields as
/// given, each present (null when absent), and whether it is a batch's.
/// Written with rapidjson alone (the unit tests link no JSON writer of the
/// tool's).
std::string decided_by(const command_fields_read& c, bool in_batch) {
  rapidjson::StringBuffer text;
  rapidjson::Writer<rapidjson::StringBuffer> w{text};
  auto string = [&](const char* key, const std::optional<std::string>& x) {
    w.Key(key);
    if (x)
      w.String(x->data(), static_cast<rapidjson::SizeType>(x->size()));
    else
      w.Null();
  };
  auto integer = [&](const char* key, const std::optional<int64_t>& x) {
    w.Key(key);
    if (x)
      w.Int64(*x);
    else
      w.Null();
  };
  auto opt = [](const auto& x, auto fn) -> std::optional<std::string> {
    if (!x)
      return std::nullopt;
    return fn(*x);
  };
  w.StartObject();
  string("type", c.type);
  w.Key("data");
  auto& data = c.data.text();
  w.RawValue(data.data(), data.size(), rapidjson::kObjectType);
  string("correlation_id",
         opt(c.correlation_id, [](const uuid& x) { return x.to_string(); }));
  string("reply_to", c.reply_to);
  integer("max_attempts", c.max_attempts);
  integer("priority", c.priority);
  string("not_before",
         opt(c.at, [](const timestamp& x) { return format_timestamp(x); }));
  integer("delay_ms", c.delay ? std::optional<int64_t>{c.delay->count()}
                             : std::nullopt);
  w.Key("batch");
  w.Bool(in_batch);
  w.EndObject();
  return {text.GetString(), text.GetSize()};
}

command_fields_read read_command(const node& n, std::string_view body,
                                 const std::string& what) {
  fields f{n, what, command_fields};
  command_fields_read out;
  auto type = f.string("type");
  if (!type || type->empty())
    bad(f.field("type") + " is required (a non-empty string)");
  if (type->size() > 255)
    bad(f.field("type") + " is longer than 255 bytes");
  out.type = *type;
  if (auto* d = f.of("data", node::object))
    // The tree checked it (it is part of a valid body): taken as written.
    out.data = json::parse(body.substr(d->begin, d->end - d->begin));
  out.command_id = f.id("command_id");
  if (out.command_id && out.command_id->is_nil())
    bad(f.field("command_id") + " must not be the nil UUID");
  out.correlation_id = f.id("correlation_id");
  if (auto q = f.string("reply_to")) {
    try {
      db::validate_queue_name(*q);
    } catch (const std::exception& e) {
      bad(f.field("reply_to") + ": " + e.what());
    }
    out.reply_to = *q;
  }
  out.max_attempts = f.integer("max_attempts", 1, 1000);
  out.priority = f.integer("priority", -1'000'000, 1'000'000);
  auto at = f.string("not_before");
  auto delay = f.string("delay");
  if (at && delay)
    bad(what + ": \"not_before\" and \"delay\" exclude each other");
  if (at) {
    out.not_before = parse_timestamp(*at);
    if (!out.not_before)
      bad(f.field("not_before")
          + " is not an RFC 3339 time (e.g. 2026-12-01T03:00:00Z)");
    out.at = out.not_before;
  }
  if (delay) {
    auto d = duration_of(*delay);
    if (!d)
      bad(f.field("delay")
          + " is not a duration (a number with unit ms, s, m or h)");
    out.not_before = not_before_in(*d);
    out.delay = d;
  }
  return out;
}

} // namespace

void check_domain(std::string_view domain) {
  try {
    db::validate_domain(domain);
  } catch (const std::exception& e) {
    bad(std::string{"invalid domain: "} + e.what());
  }
}

uuid parse_command_id(std::string_view text) {
  auto x = uuid::parse(text);
  if (!x)
    bad("the command id is not a UUID");
  return *x;
}

milliseconds parse_wait(const std::optional<std::string>& text) {
  if (!text)
    return default_wait;
  auto d = duration_of(*text);
  if (!d)
    bad("wait is not a duration (a number with unit ms, s or m, e.g. 15s)");
  if (*d > max_wait)
    bad("wait is longer than " + std::to_string(max_wait.count() / 1000)
        + " s");
  return *d;
}

send_body parse_send_body(const std::string& domain, std::string_view body) {
  auto tree = read_tree(body, 1);
  auto c = read_command(*tree, body, "the body");
  send_body out;
  auto& r = out.request;
  r.domain = domain;
  out.id_given = c.command_id.has_value();
  if (out.id_given)
    out.decided = decided_by(c, false);
  r.command_type = std::move(c.type);
  r.command_id = c.command_id.value_or(uuid::random());
  r.data = std::move(c.data);
  r.correlation_id = c.correlation_id;
  r.reply_to = std::move(c.reply_to);
  r.max_attempts = c.max_attempts;
  r.not_before = c.not_before;
  r.priority = c.priority;
  return out;
}

batch_body parse_batch_body(std::string_view body) {
  auto tree = read_tree(body, 3);
  fields f{*tree, "the body", {"batch_id", "name", "custom_data", "commands"}};
  batch_body out;
  out.batch_id = f.id("batch_id");
  out.name = f.string("name");
  if (auto* d = f.of("custom_data", node::object))
    out.custom_data = json::parse(body.substr(d->begin, d->end - d->begin));
  auto* list = f.of("commands", node::array);
  if (list == nullptr || list->items.empty())
    bad("field \"commands\" of the body is required (an array of 1 to "
        + std::to_string(max_batch_commands) + " commands)");
  if (list->items.size() > max_batch_commands)
    bad("field \"commands\" has more than " + std::to_string(max_batch_commands)
        + " commands");
  for (size_t i = 0; i < list->items.size(); ++i) {
    auto c = read_command(*list->items[i], body,
                          "commands[" + std::to_string(i) + "]");
    out.decided.push_back(c.command_id ? decided_by(c, true) : std::string{});
    batch_command b;
    b.command_type = std::move(c.type);
    b.command_id = c.command_id.value_or(uuid::random());
    b.data = std::move(c.data);
    b.correlation_id = c.correlation_id;
    b.reply_to = std::move(c.reply_to);
    b.max_attempts = c.max_attempts;
    b.not_before = c.not_before;
    b.priority = c.priority;
    out.commands.push_back(std::move(b));
  }
  return out;
}

} // namespace cmdbus::api
