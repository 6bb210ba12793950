#pragma once

// The worker's metrics in the Prometheus text exposition format 0.0.4
// (the format of GET /metrics; docs/worker.md lists the metrics).

#include <string>
#include <string_view>

#include "cmdbus/actors/ops/status_snapshot.hpp"

namespace cmdbus {

/// The Content-Type of the format.
inline constexpr const char* exposition_content_type
  = "text/plain; version=0.0.4; charset=utf-8";

/// Renders `s`: every metric family with its HELP and TYPE lines, the
/// series of a family together, label values escaped.
std::string render_metrics(const status_snapshot& s);

/// Returns `value` escaped for a label value: backslash, double quote and
/// line feed become \\, \" and \n.
std::string escape_label_value(std::string_view value);

/// Returns `x` as the format writes a sample value: an integer without a
/// fraction, +Inf / -Inf / NaN by name, else the shortest text that reads
/// back as the same double.
std::string sample_value(double x);

} // namespace cmdbus
