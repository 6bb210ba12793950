// The worker's status page (GET /) in a real headless browser (Debian's
// chromium): it loads, shows the live figures of a running worker (health,
// in-flight against slots, the queue, the TSQ, outcomes), follows them as
// they change, and a screenshot of it is kept in the test's output
// (build/test-output/status-page.png).

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/http_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;

const fs::path output_dir = CMDBUS_TEST_OUTPUT_DIR;

// Runs headless chromium on `url` with `what` (--dump-dom, or
// --screenshot=FILE) and a profile of its own.
process_result chromium(const std::string& url, const std::string& what) {
  auto profile = output_dir / "chromium-profile";
  fs::create_directories(profile);
  return run_process({"/usr/bin/chromium", "--headless=new", "--no-sandbox",
                      "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                      "--user-data-dir=" + profile.string(),
                      "--window-size=1200,720", what, url},
                     {"HOME=" + output_dir.string()});
}

// The text of the element of the row of `domain` that has data-field
// `field`, from the DOM chromium rendered.
std::string field(const std::string& dom, const std::string& domain,
                  const std::string& field) {
  auto row_start = dom.find("id=\"domain-" + domain + "\"");
  if (row_start == std::string::npos)
    return "<no row for " + domain + ">";
  auto row = dom.substr(row_start, dom.find("</tr>", row_start) - row_start);
  std::smatch m;
  std::regex re{"data-field=\"" + field + "\"[^>]*>([^<]*)<"};
  if (!std::regex_search(row, m, re))
    return "<no " + field + ">";
  return m[1];
}

} // namespace

TEST(StatusPage, ShowsTheLiveFiguresOfARunningWorkerInChromium) {
  bus_env e;
  auto d = test::unique_name("sp");
  for (int i = 0; i < 4; ++i)
    e.bus.send(make_req(d, "Hold"));
  holding_handler held;
  handler_registry reg;
  reg.add(d, "Hold", held.fn());
  auto cfg = make_cfg({d}, 1);
  cfg.http = "127.0.0.1:0";
  worker w{cfg, std::move(reg)};
  finally stop{[&] {
    held.release.open();
    stop_worker(w);
  }};
  w.start();
  auto port = w.http_port();
  auto url = "http://127.0.0.1:" + std::to_string(port) + "/";
  ASSERT_TRUE(eventually([&] { return held.entered.load() == 1; }));
  // One command runs (its slot is the only one), three wait.
  std::string dom;
  ASSERT_TRUE(eventually(
    [&] {
      auto r = chromium(url, "--dump-dom");
      dom = r.out;
      return r.exit_code == 0 && field(dom, d, "visible") == "3";
    },
    60s))
    << dom;
  EXPECT_NE(dom.find("<title>cmdbus worker: HEALTHY</title>"),
            std::string::npos);
  EXPECT_NE(dom.find("http-equiv=\"refresh\""), std::string::npos);
  EXPECT_EQ(field(dom, d, "health"), "HEALTHY");
  EXPECT_EQ(field(dom, d, "in-flight"), "1");
  EXPECT_EQ(field(dom, d, "slots"), "1");
  EXPECT_EQ(field(dom, d, "queue-depth"), "4");
  EXPECT_EQ(field(dom, d, "tsq"), "0");
  fs::create_directories(output_dir);
  auto shot = output_dir / "status-page.png";
  fs::remove(shot);
  auto r = chromium(url, "--screenshot=" + shot.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream png{shot, std::ios::binary};
  char magic[8] = {};
  png.read(magic, sizeof magic);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG") << shot;
  EXPECT_GT(fs::file_size(shot), 10000u) << shot;
  std::cout << "status page screenshot: " << shot.string() << std::endl;
  // The page follows the worker: everything done, nothing waits.
  held.release.open();
  ASSERT_TRUE(eventually(
    [&] {
      dom = chromium(url, "--dump-dom").out;
      return field(dom, d, "queue-depth") == "0"
             && field(dom, d, "in-flight") == "0";
    },
    60s))
    << dom;
  EXPECT_NE(dom.find("<td>Hold</td><td class=\"num\">4</td>"),
            std::string::npos)
    << dom;
}
