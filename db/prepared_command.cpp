#include "cmdbus/db/prepared_command.hpp"

#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/wire.hpp"

namespace cmdbus::db {

std::string validated_queue(const send_request& req) {
  auto queue = command_queue(req.domain);
  if (req.reply_to)
    validate_queue_name(*req.reply_to);
  if (req.command_type.empty())
    throw command_bus_error("command_type must not be empty");
  if (!req.data.is_object())
    throw command_bus_error("command data must be a JSON object");
  return queue;
}

prepared_command prepare(const send_request& req, int default_max_attempts) {
  prepared_command p;
  p.queue = validated_queue(req);
  p.domain = req.domain;
  p.command_type = req.command_type;
  p.command_id = req.command_id;
  p.correlation_id = req.correlation_id ? *req.correlation_id : uuid::random();
  p.reply_to = req.reply_to;
  p.max_attempts = req.max_attempts && *req.max_attempts > 0
                     ? *req.max_attempts
                     : default_max_attempts;
  p.batch_id = req.batch_id;
  p.not_before = req.not_before;
  command msg;
  msg.domain = req.domain;
  msg.command_type = req.command_type;
  msg.command_id = req.command_id;
  msg.data = req.data;
  msg.correlation_id = p.correlation_id;
  msg.reply_to = req.reply_to;
  msg.priority = req.priority;
  p.message = wire::encode_command(msg);
  return p;
}

} // namespace cmdbus::db
