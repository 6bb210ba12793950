#include "api/operations.hpp"

#include <algorithm>

namespace cmdbus::api {

const std::vector<operation>& operations() {
  static const std::vector<operation> all{
    {"get", "/healthz", {200, 408, 431, 503}},
    {"post",
     "/v1/domains/{domain}/commands",
     {200, 201, 400, 401, 403, 404, 408, 409, 411, 413, 431, 500, 503}},
    {"get",
     "/v1/domains/{domain}/commands/{command_id}",
     {200, 202, 400, 401, 403, 404, 408, 422, 431, 500, 503}},
    {"post",
     "/v1/domains/{domain}/batches",
     {201, 400, 401, 403, 404, 408, 409, 411, 413, 431, 500, 503}},
  };
  return all;
}

bool declares(op o, int status) {
  auto& s = operations().at(static_cast<size_t>(o)).statuses;
  return std::find(s.begin(), s.end(), status) != s.end();
}

} // namespace cmdbus::api
