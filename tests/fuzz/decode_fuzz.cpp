// libFuzzer target for the decoders of untrusted input: wire::decode_command,
// wire::decode_reply, json::parse and the command API's request bodies
// (api/request.hpp). Any input must either decode or throw decode_error
// (api_error for a request body); whatever decodes must re-encode to something
// that decodes to the same value and re-encodes to the same bytes. Anything
// else (another exception, a crash, a sanitizer report, a mismatch) aborts: a
// finding. Build and run with scripts/fuzz.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "api/request.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/wire.hpp"

namespace {

using namespace cmdbus;

/// Limits for decoding our own output again: encoding a FAILED reply nests
/// the details one level deeper than they arrived, and encoders enforce no
/// limits, so allow more than any input limit used below.
decode_limits relaxed() {
  decode_limits x;
  x.max_depth = 128;
  return x;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "decode_fuzz: %s\n", what);
  std::abort();
}

void check_command(std::string_view in, const decode_limits& limits) {
  command first;
  try {
    first = wire::decode_command(in, limits);
  } catch (const decode_error&) {
    return;
  }
  auto text = wire::encode_command(first);
  command second;
  try {
    second = wire::decode_command(text, relaxed());
  } catch (const decode_error&) {
    finding("encoded command does not decode");
  }
  if (second != first)
    finding("command changed in a decode/encode round trip");
  if (wire::encode_command(second) != text)
    finding("command encoding is not stable");
}

void check_reply(std::string_view in, const decode_limits& limits) {
  reply first;
  try {
    first = wire::decode_reply(in, limits);
  } catch (const decode_error&) {
    return;
  }
  auto text = wire::encode_reply(first);
  reply second;
  try {
    second = wire::decode_reply(text, relaxed());
  } catch (const decode_error&) {
    finding("encoded reply does not decode");
  }
  if (second != first)
    finding("reply changed in a decode/encode round trip");
  if (wire::encode_reply(second) != text)
    finding("reply encoding is not stable");
}

void check_json(std::string_view in, const decode_limits& limits) {
  json first;
  try {
    first = json::parse(in, limits);
  } catch (const decode_error&) {
    return;
  }
  json second;
  try {
    second = json::parse(first.text(), relaxed());
  } catch (const decode_error&) {
    finding("compact JSON text does not parse");
  }
  if (second != first)
    finding("json::parse is not idempotent");
}

/// A body the API takes is one it can send: a type of 1 to 255 bytes, an
/// object payload that parses again to itself.
void check_send_command(const std::string& type, const json& data) {
  if (type.empty() || type.size() > 255)
    finding("the API took a body with an empty or overlong type");
  if (!data.is_object())
    finding("the API took a payload that is not an object");
  try {
    if (json::parse(data.text(), relaxed()) != data)
      finding("the API's payload does not parse to itself");
  } catch (const decode_error&) {
    finding("the API's payload does not parse");
  }
}

void check_api_request(std::string_view in) {
  try {
    auto b = api::parse_send_body("fuzz", in);
    check_send_command(b.request.command_type, b.request.data);
  } catch (const api::api_error& e) {
    if (e.status() != 400 && e.status() != 413)
      finding("the API refused a body with a status other than 400/413");
  }
  try {
    auto b = api::parse_batch_body(in);
    if (b.commands.empty() || b.commands.size() > api::max_batch_commands)
      finding("the API took a batch of a size out of range");
    for (auto& c : b.commands)
      check_send_command(c.command_type, c.data);
  } catch (const api::api_error& e) {
    if (e.status() != 400 && e.status() != 413)
      finding("the API refused a batch with a status other than 400/413");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in{reinterpret_cast<const char*>(data), size};
  decode_limits defaults;
  decode_limits tight;
  tight.max_bytes = 256;
  tight.max_depth = 3;
  for (auto* limits : {&defaults, &tight}) {
    check_command(in, *limits);
    check_reply(in, *limits);
    check_json(in, *limits);
  }
  check_api_request(in);
  return 0;
}
