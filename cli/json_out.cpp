#include "cmdbus/cli/json_out.hpp"

namespace cmdbus::cli {

json_out::json_out() : w_(buf_) {
  // nop
}

json_out& json_out::begin_object() {
  w_.StartObject();
  return *this;
}

json_out& json_out::end_object() {
  w_.EndObject();
  return *this;
}

json_out& json_out::begin_array() {
  w_.StartArray();
  return *this;
}

json_out& json_out::end_array() {
  w_.EndArray();
  return *this;
}

json_out& json_out::key(std::string_view name) {
  w_.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
  return *this;
}

json_out& json_out::value(std::string_view x) {
  w_.String(x.data(), static_cast<rapidjson::SizeType>(x.size()));
  return *this;
}

json_out& json_out::value(const char* x) {
  return value(std::string_view{x});
}

json_out& json_out::value(const std::string& x) {
  return value(std::string_view{x});
}

json_out& json_out::value(int64_t x) {
  w_.Int64(x);
  return *this;
}

json_out& json_out::value(int x) {
  w_.Int(x);
  return *this;
}

json_out& json_out::value(size_t x) {
  w_.Uint64(x);
  return *this;
}

json_out& json_out::value(double x) {
  w_.Double(x);
  return *this;
}

json_out& json_out::value(bool x) {
  w_.Bool(x);
  return *this;
}

json_out& json_out::value(const uuid& x) {
  return value(x.to_string());
}

json_out& json_out::value(timestamp x) {
  return value(format_timestamp(x));
}

json_out& json_out::value(const json& x) {
  const auto& text = x.text();
  w_.RawValue(text.data(), text.size(), rapidjson::kObjectType);
  return *this;
}

json_out& json_out::null() {
  w_.Null();
  return *this;
}

std::string json_out::text() const {
  return {buf_.GetString(), buf_.GetSize()};
}

void json_out::print(std::ostream& out) const {
  out << text() << '\n';
}

void write_command(json_out& out, const command_metadata& m) {
  out.begin_object();
  write_command_fields(out, m);
  out.end_object();
}

void write_command_fields(json_out& out, const command_metadata& m) {
  out.field("domain", m.domain)
    .field("command_id", m.command_id)
    .field("command_type", m.command_type)
    .field("status", to_string(m.status))
    .field("attempts", m.attempts)
    .field("max_attempts", m.max_attempts)
    .field("msg_id", m.msg_id)
    .field("correlation_id", m.correlation_id)
    .field("reply_to", m.reply_to)
    .field("last_error_type", m.last_error_type)
    .field("last_error_code", m.last_error_code)
    .field("last_error_msg", m.last_error_msg)
    .field("created_at", m.created_at)
    .field("updated_at", m.updated_at)
    .field("batch_id", m.batch_id);
}

void write_audit_event(json_out& out, const audit_event& ev) {
  out.begin_object()
    .field("audit_id", ev.audit_id)
    .field("event_type", ev.event_type)
    .field("ts", ev.ts)
    .field("details", ev.details)
    .end_object();
}

void write_batch(json_out& out, const batch_metadata& b) {
  auto finished = b.completed_count + b.failed_count + b.canceled_count;
  double progress = b.total_count > 0
                      ? static_cast<double>(finished) / b.total_count
                      : 0.0;
  out.begin_object()
    .field("domain", b.domain)
    .field("batch_id", b.batch_id)
    .field("name", b.name)
    .field("custom_data", b.custom_data)
    .field("status", to_string(b.status))
    .field("batch_type", b.batch_type)
    .field("total_count", b.total_count)
    .field("completed_count", b.completed_count)
    .field("failed_count", b.failed_count)
    .field("canceled_count", b.canceled_count)
    .field("in_troubleshooting_count", b.in_troubleshooting_count)
    .field("progress", progress)
    .field("created_at", b.created_at)
    .field("started_at", b.started_at)
    .field("completed_at", b.completed_at)
    .end_object();
}

} // namespace cmdbus::cli
