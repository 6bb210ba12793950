#include "tests/support/http_env.hpp"

#include <cstdlib>
#include <sstream>

#include <gtest/gtest.h>
#include <httplib.h>

#include "tests/support/process.hpp"

namespace cmdbus::test {

namespace {

std::string key_of(const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  std::string key = name + "{";
  bool first = true;
  for (auto& [k, v] : labels) {
    key += (first ? "" : ",") + k + "=" + v;
    first = false;
  }
  return key + "}";
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in{text};
  while (std::getline(in, part, sep))
    out.push_back(part);
  if (!text.empty() && text.back() == sep)
    out.emplace_back();
  return out;
}

} // namespace

http_response http_get(int port, const std::string& path) {
  httplib::Client client{"127.0.0.1", port};
  client.set_connection_timeout(std::chrono::seconds{2});
  client.set_read_timeout(std::chrono::seconds{2});
  http_response out;
  if (auto res = client.Get(path)) {
    out.status = res->status;
    out.content_type = res->get_header_value("Content-Type");
    out.body = res->body;
  }
  return out;
}

double metrics::value(const std::string& name,
                      const std::map<std::string, std::string>& labels) const {
  auto i = samples.find(key_of(name, labels));
  return i == samples.end() ? -1 : i->second;
}

metrics scrape(int port) {
  auto url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  auto r = run_process({"/usr/bin/python3",
                        CMDBUS_SOURCE_DIR "/tests/support/parse_metrics.py",
                        url});
  metrics m;
  m.text = r.out;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0)
    return m;
  std::istringstream lines{r.out};
  std::string line;
  while (std::getline(lines, line)) {
    auto fields = split(line, '\x1f');
    if (fields.size() != 3) {
      ADD_FAILURE() << "unexpected parser line: " << line;
      continue;
    }
    std::map<std::string, std::string> labels;
    if (!fields[1].empty())
      for (auto& kv : split(fields[1], '\x1e')) {
        auto eq = kv.find('=');
        labels[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
    m.samples[key_of(fields[0], labels)] = std::strtod(fields[2].c_str(),
                                                       nullptr);
  }
  return m;
}

} // namespace cmdbus::test
