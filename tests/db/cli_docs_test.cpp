// docs/cli.md and the --help texts agree: every option that a command's
// --help lists under "Options" is named in the command's section of the
// documentation, and every help stays within 80 columns. The help texts are
// generated from the commands' option tables, so a new option that is not
// documented fails here. No database is needed.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace cmdbus::test {
namespace {

std::string read_docs() {
  std::ifstream in{CMDBUS_SOURCE_DIR "/docs/cli.md"};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The part of `docs` from the heading `heading` (a whole line) to the next
// heading of the same or a higher level.
std::string section(const std::string& docs, const std::string& heading) {
  auto at = docs.find("\n" + heading + "\n");
  if (at == std::string::npos)
    return {};
  auto level = heading.substr(0, heading.find(' ') + 1); // "### "
  auto end = at + heading.size() + 2;
  while (true) {
    end = docs.find("\n#", end);
    if (end == std::string::npos)
      return docs.substr(at);
    auto line = docs.substr(end + 1, docs.find('\n', end + 1) - end - 1);
    auto hashes = line.substr(0, line.find(' ') + 1);
    if (hashes.size() <= level.size())
      return docs.substr(at, end - at);
    ++end;
  }
}

// The option names of a help's Options block: the lines indented by two
// spaces that start with an option, from the "Options" heading to the next
// blank line.
std::vector<std::string> options_of(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in{help};
  std::string line;
  bool in_block = false;
  static const std::regex option_line{R"(^  (-[a-zA-Z], )?(--[a-z0-9-]*))"};
  while (std::getline(in, line)) {
    if (line.rfind("Options", 0) == 0) {
      in_block = true;
      continue;
    }
    if (!in_block)
      continue;
    if (line.empty()) {
      if (!out.empty())
        break;
      continue;
    }
    std::smatch m;
    if (std::regex_search(line, m, option_line))
      out.push_back(m[2]);
  }
  return out;
}

struct documented_command {
  std::vector<std::string> args;
  std::string heading;
};

const std::vector<documented_command> commands{
  {{}, "## Global options"},
  {{"migrate"}, "### `cmdbus migrate`"},
  {{"grant"}, "### `cmdbus grant`"},
  {{"send"}, "### `cmdbus send DOMAIN TYPE`"},
  {{"send-batch"}, "### `cmdbus send-batch DOMAIN`"},
  {{"show"}, "### `cmdbus show DOMAIN COMMAND_ID`"},
  {{"list"}, "### `cmdbus list DOMAIN`"},
  {{"wait"}, "### `cmdbus wait DOMAIN COMMAND_ID`"},
  {{"cancel"}, "### `cmdbus cancel DOMAIN COMMAND_ID`"},
  {{"prune"}, "### `cmdbus prune`"},
  {{"schedule", "add"}, "### `cmdbus schedule`"},
  {{"schedule", "list"}, "### `cmdbus schedule`"},
  {{"schedule", "show"}, "### `cmdbus schedule`"},
  {{"schedule", "pause"}, "### `cmdbus schedule`"},
  {{"schedule", "resume"}, "### `cmdbus schedule`"},
  {{"schedule", "remove"}, "### `cmdbus schedule`"},
  {{"schedule", "trigger"}, "### `cmdbus schedule`"},
  {{"tsq", "list"}, "### `cmdbus tsq`"},
  {{"tsq", "show"}, "### `cmdbus tsq`"},
  {{"tsq", "retry"}, "### `cmdbus tsq`"},
  {{"tsq", "cancel"}, "### `cmdbus tsq`"},
  {{"tsq", "complete"}, "### `cmdbus tsq`"},
  {{"batch", "list"}, "### `cmdbus batch`"},
  {{"batch", "show"}, "### `cmdbus batch`"},
  {{"batch", "refresh"}, "### `cmdbus batch`"},
  {{"process", "list"}, "### `cmdbus process`"},
  {{"process", "show"}, "### `cmdbus process`"},
  {{"process", "start"}, "### `cmdbus process`"},
  {{"stats"}, "### `cmdbus stats [DOMAIN]`"},
  {{"queues"}, "### `cmdbus queues`"},
  {{"replies"}, "### `cmdbus replies QUEUE`"},
  {{"worker"}, "### `cmdbus worker`"},
  {{"node"}, "### `cmdbus node`"},
  {{"cluster", "status"}, "### `cmdbus cluster`"},
  {{"cluster", "drain"}, "### `cmdbus cluster`"},
  {{"api"}, "### `cmdbus api`"},
};

} // namespace

TEST(CliDocs, EveryOptionOfEveryCommandIsInDocsCliMd) {
  auto docs = read_docs();
  ASSERT_FALSE(docs.empty()) << "cannot read docs/cli.md";
  for (const auto& c : commands) {
    auto args = c.args;
    args.push_back("--help");
    std::string shown = "cmdbus";
    for (const auto& a : args)
      shown += " " + a;
    auto r = run_cmdbus(args);
    ASSERT_EQ(r.exit_code, 0) << shown << ": " << r.err;
    auto text = section(docs, c.heading);
    ASSERT_FALSE(text.empty()) << "docs/cli.md has no section " << c.heading;
    auto options = options_of(r.out);
    EXPECT_FALSE(options.empty()) << shown << " lists no options:\n" << r.out;
    for (const auto& o : options) {
      // --help is on every command, as the reference's introduction says.
      if (o == "--help" && !c.args.empty())
        continue;
      EXPECT_NE(text.find("`" + o), std::string::npos)
        << o << " of `" << shown << "` is not in " << c.heading
        << " of docs/cli.md";
    }
    std::istringstream lines{r.out};
    std::string line;
    while (std::getline(lines, line))
      EXPECT_LE(line.size(), 80u) << shown << ": " << line;
  }
}

TEST(CliDocs, EveryCommandTakesHelpAndListsIt) {
  for (const auto& c : commands) {
    auto args = c.args;
    args.push_back("-h");
    auto r = run_cmdbus(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto options = options_of(r.out);
    EXPECT_NE(std::find(options.begin(), options.end(), "--help"),
              options.end())
      << "--help is not listed by " << r.out;
  }
}

} // namespace cmdbus::test
