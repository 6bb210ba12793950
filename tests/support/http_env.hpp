#pragma once

// Talking to a worker's HTTP endpoint in the tests: plain GETs, and
// /metrics read through tests/support/parse_metrics.py (a real exposition
// format parser) into samples that a test looks up by name and labels.

#include <map>
#include <string>
#include <vector>

namespace cmdbus::test {

struct http_response {
  /// 0 when nothing answered.
  int status = 0;
  std::string content_type;
  std::string body;
};

/// GETs http://127.0.0.1:PORT/PATH (2 s timeouts).
http_response http_get(int port, const std::string& path);

/// The samples of one scrape.
struct metrics {
  /// "name{k=v,...}" (labels sorted) to value.
  std::map<std::string, double> samples;
  /// What the parser printed, for failure messages.
  std::string text;

  /// Returns the sample of `name` with exactly `labels`, or -1 when there
  /// is none.
  double value(const std::string& name,
               const std::map<std::string, std::string>& labels) const;
};

/// Scrapes /metrics of the worker on `port` with the parser script; fails
/// the test (and returns no samples) when the script rejects the text.
metrics scrape(int port);

} // namespace cmdbus::test
