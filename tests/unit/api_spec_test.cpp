// docs/api.yaml describes the command API exactly: every operation the
// server serves (api/operations.hpp, which the server checks each answer
// against) with every status it answers, and nothing else. The YAML is
// read by PyYAML (Debian's python3-yaml), a real parser.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "api/operations.hpp"

namespace {

/// "METHOD PATH STATUS" for every response of every operation in
/// docs/api.yaml, and whether the document parsed.
std::set<std::string> described(bool& ok) {
  const std::string script = "import sys, yaml\n"
                             "d = yaml.safe_load(open(sys.argv[1]))\n"
                             "for path, ops in d[\"paths\"].items():\n"
                             "    for method, op in ops.items():\n"
                             "        for status in op[\"responses\"]:\n"
                             "            print(method, path, int(status))\n";
  auto command = "python3 -c '" + script
                 + "' '" CMDBUS_SOURCE_DIR "/docs/api.yaml' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p{popen(command.c_str(), "r"), pclose};
  std::set<std::string> out;
  if (!p) {
    ok = false;
    return out;
  }
  char line[512];
  std::string all;
  while (fgets(line, sizeof line, p.get()) != nullptr) {
    std::string l{line};
    if (!l.empty() && l.back() == '\n')
      l.pop_back();
    out.insert(l);
  }
  ok = pclose(p.release()) == 0;
  return out;
}

} // namespace

TEST(ApiSpec, TheOpenApiDescriptionMatchesTheServersOperations) {
  bool ok = false;
  auto doc = described(ok);
  ASSERT_TRUE(ok) << "python3 could not read docs/api.yaml: "
                  << (doc.empty() ? "" : *doc.begin());
  std::set<std::string> served;
  for (auto& o : cmdbus::api::operations())
    for (auto status : o.statuses)
      served.insert(std::string{o.method} + " " + std::string{o.path} + " "
                    + std::to_string(status));
  for (auto& x : served)
    EXPECT_EQ(doc.count(x), 1u) << "not in docs/api.yaml: " << x;
  for (auto& x : doc)
    EXPECT_EQ(served.count(x), 1u) << "the server does not answer: " << x;
}
