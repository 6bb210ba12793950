#include "cmdbus/db/rows.hpp"

#include <string>

#include "cmdbus/model/errors.hpp"

namespace cmdbus::db {

namespace {

template <class T, class F>
std::vector<T> decode_all(const result& r, F decode) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(decode(r, i));
  return out;
}

} // namespace

// -- fields ------------------------------------------------------------------

uuid uuid_at(const result& r, int row, int col) {
  auto x = uuid::parse(r.text(row, col));
  if (!x)
    throw command_bus_error("invalid UUID in column " + r.column_name(col));
  return *x;
}

std::optional<uuid> opt_uuid_at(const result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return uuid_at(r, row, col);
}

timestamp time_at(const result& r, int row, int col) {
  auto t = parse_timestamp(r.text(row, col));
  if (!t)
    throw command_bus_error("invalid timestamp in column "
                            + r.column_name(col));
  return *t;
}

std::optional<timestamp> opt_time_at(const result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return time_at(r, row, col);
}

std::optional<json> opt_json_at(const result& r, int row, int col) {
  if (r.is_null(row, col))
    return std::nullopt;
  return json::parse(r.text(row, col));
}

int int_at(const result& r, int row, int col) {
  return static_cast<int>(r.int64(row, col));
}

// -- rows --------------------------------------------------------------------

command_metadata to_command_metadata(const result& r, int i) {
  command_metadata m;
  m.domain = std::string{r.text(i, 0)};
  m.command_id = uuid_at(r, i, 1);
  m.command_type = std::string{r.text(i, 2)};
  auto status = parse_command_status(r.text(i, 3));
  if (!status)
    throw command_bus_error("unknown command status "
                            + std::string{r.text(i, 3)});
  m.status = *status;
  m.attempts = int_at(r, i, 4);
  m.max_attempts = int_at(r, i, 5);
  if (!r.is_null(i, 6))
    m.msg_id = r.int64(i, 6);
  m.correlation_id = opt_uuid_at(r, i, 7);
  if (!r.text(i, 8).empty())
    m.reply_to = std::string{r.text(i, 8)};
  m.last_error_type = r.opt_text(i, 9);
  m.last_error_code = r.opt_text(i, 10);
  m.last_error_msg = r.opt_text(i, 11);
  m.created_at = time_at(r, i, 12);
  m.updated_at = time_at(r, i, 13);
  m.batch_id = opt_uuid_at(r, i, 14);
  return m;
}

std::vector<command_metadata> to_commands(const result& r) {
  return decode_all<command_metadata>(r, to_command_metadata);
}

batch_metadata to_batch_metadata(const result& r, int i) {
  batch_metadata b;
  b.domain = std::string{r.text(i, 0)};
  b.batch_id = uuid_at(r, i, 1);
  b.name = r.opt_text(i, 2);
  b.custom_data = opt_json_at(r, i, 3);
  auto status = parse_batch_status(r.text(i, 4));
  if (!status)
    throw command_bus_error("unknown batch status "
                            + std::string{r.text(i, 4)});
  b.status = *status;
  b.batch_type = std::string{r.text(i, 5)};
  b.total_count = int_at(r, i, 6);
  b.completed_count = int_at(r, i, 7);
  b.failed_count = int_at(r, i, 8);
  b.canceled_count = int_at(r, i, 9);
  b.in_troubleshooting_count = int_at(r, i, 10);
  b.created_at = time_at(r, i, 11);
  b.started_at = opt_time_at(r, i, 12);
  b.completed_at = opt_time_at(r, i, 13);
  return b;
}

std::vector<batch_metadata> to_batches(const result& r) {
  return decode_all<batch_metadata>(r, to_batch_metadata);
}

audit_event to_audit_event(const result& r, int i) {
  audit_event ev;
  ev.audit_id = r.int64(i, 0);
  ev.domain = std::string{r.text(i, 1)};
  ev.command_id = uuid_at(r, i, 2);
  ev.event_type = std::string{r.text(i, 3)};
  ev.ts = time_at(r, i, 4);
  ev.details = opt_json_at(r, i, 5);
  return ev;
}

} // namespace cmdbus::db
