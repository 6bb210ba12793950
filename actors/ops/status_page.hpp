#pragma once

// The bodies of the worker's HTTP endpoint other than /metrics: the status
// page (GET /), and the JSON of /healthz and /readyz.

#include <string>

#include "cmdbus/actors/ops/status_snapshot.hpp"

namespace cmdbus {

/// Seconds between the status page's own refreshes.
inline constexpr int status_page_refresh_seconds = 2;

/// The status page: one self-contained HTML document (inline CSS, no
/// script, no external assets) that reloads itself every
/// status_page_refresh_seconds. Per domain: health with its reasons,
/// in-flight commands against handler slots, throughput over the last
/// minute, the command queue's depth and oldest visible age, the TSQ size,
/// and the outcomes so far by command type.
std::string render_status_page(const status_snapshot& s);

/// The body of /healthz: {"status", "domains": [{"domain", "status",
/// "reasons"}]}.
std::string render_health_json(const status_snapshot& s);

/// The body of /readyz: {"ready", "state", "domains": [{"domain",
/// "polling"}]}.
std::string render_ready_json(const status_snapshot& s);

} // namespace cmdbus
