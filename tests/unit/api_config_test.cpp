// The command API's settings (config/api_config.hpp): `cmdbus api`'s [api]
// and [tls] from a file, the environment and the command line, in that
// order; what validation refuses (a partial TLS set, a CA without a
// certificate, unreadable files, bad numbers and addresses); and a
// worker's [api] section (--api, --api-tokens-file, ...), described back
// by --dump-config.

#include "cmdbus/config/api_config.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "cmdbus/config/settings.hpp"
#include "cmdbus/config/worker_config.hpp"
#include "tests/support/config_fakes.hpp"

using namespace cmdbus::config;
using namespace cmdbus::test;

namespace {

/// The command line of `cmdbus api` as load_api sees it.
auto options(std::map<std::string, std::string> given) {
  return [given](std::string_view name) -> std::optional<std::string> {
    auto i = given.find(std::string{name});
    if (i == given.end())
      return std::nullopt;
    return i->second;
  };
}

api_program_config load(const std::optional<std::string>& file,
                        const fake_env& env,
                        std::map<std::string, std::string> given = {}) {
  return detail::load_api(file, env.lookup(), options(std::move(given)));
}

} // namespace

TEST(ApiConfig, DefaultsListenOnLoopbackWithoutTls) {
  auto cfg = load(std::nullopt, fake_env{});
  EXPECT_EQ(cfg.api.listen, "127.0.0.1:8780");
  EXPECT_EQ(cfg.api.threads, 16);
  EXPECT_EQ(cfg.api.connections, 4);
  EXPECT_TRUE(cfg.api.tokens_file.empty());
  EXPECT_FALSE(cfg.tls.enabled());
}

TEST(ApiConfig, FileThenEnvironmentThenCommandLine) {
  temp_file cert{"not checked for content here"};
  temp_file key{"x"};
  temp_file ca{"x"};
  temp_file ini{"[api]\nlisten = \"0.0.0.0:9000\"\ntokens-file = "
                "\"/etc/cmdbus/api-tokens\"\nthreads = 8\nconnections = 2\n"
                "[tls]\ncertificate = \""
                + cert.path() + "\"\nkey = \"" + key.path()
                + "\"\nca-file = \"" + ca.path() + "\"\n"};
  auto cfg = load(ini.path(), fake_env{});
  EXPECT_EQ(cfg.api.listen, "0.0.0.0:9000");
  EXPECT_EQ(cfg.api.tokens_file, "/etc/cmdbus/api-tokens");
  EXPECT_EQ(cfg.api.threads, 8);
  EXPECT_EQ(cfg.api.connections, 2);
  EXPECT_EQ(cfg.tls.certificate, cert.path());
  EXPECT_EQ(cfg.tls.ca_file, ca.path());
  // The environment over the file, the command line over both.
  cfg = load(ini.path(),
             fake_env{{{"CMDBUS_API_THREADS", "4"},
                       {"CMDBUS_API_LISTEN", "127.0.0.1:9001"},
                       {"CMDBUS_TLS_PASSPHRASE", "pw"}}},
             {{"--threads", "3"}});
  EXPECT_EQ(cfg.api.threads, 3);
  EXPECT_EQ(cfg.api.listen, "127.0.0.1:9001");
  EXPECT_EQ(cfg.tls.passphrase, "pw");
  EXPECT_EQ(cfg.api.connections, 2);
}

TEST(ApiConfig, ServerTlsNeedsNoCa) {
  temp_file cert{"x"};
  temp_file key{"x"};
  auto cfg = load(std::nullopt, fake_env{},
                  {{"--tls-certificate", cert.path()},
                   {"--tls-key", key.path()}});
  EXPECT_TRUE(cfg.tls.enabled());
  EXPECT_TRUE(cfg.tls.ca_file.empty());
}

TEST(ApiConfig, RefusesAPartialTlsSetWithAClearMessage) {
  temp_file cert{"x"};
  temp_file ca{"x"};
  auto e = error_of([&] {
    load(std::nullopt, fake_env{}, {{"--tls-certificate", cert.path()}});
  });
  EXPECT_TRUE(contains(e, "TLS of the API needs tls-certificate and tls-key "
                          "together"))
    << e;
  EXPECT_TRUE(contains(e, "missing: tls-key")) << e;
  // A CA alone (client certificates without a server certificate).
  e = error_of(
    [&] { load(std::nullopt, fake_env{}, {{"--tls-ca-file", ca.path()}}); });
  EXPECT_TRUE(contains(e, "missing: tls-certificate, tls-key")) << e;
  // A file that is not there.
  e = error_of([&] {
    load(std::nullopt, fake_env{},
         {{"--tls-certificate", cert.path()},
          {"--tls-key", "/nonexistent/api.key"}});
  });
  EXPECT_TRUE(contains(e, "tls-key (/nonexistent/api.key): no such file"))
    << e;
}

TEST(ApiConfig, RefusesBadValuesAndUnknownKeys) {
  auto e = error_of([&] {
    load(std::nullopt, fake_env{{{"CMDBUS_API_THREADS", "0"}}},
         {{"--listen", "nowhere"}});
  });
  EXPECT_TRUE(contains(e, "threads (0) must be 1..1024")) << e;
  EXPECT_TRUE(contains(e, "listen (nowhere)")) << e;
  e = error_of(
    [&] { load(std::nullopt, fake_env{}, {{"--connections", "many"}}); });
  EXPECT_TRUE(contains(e, "option --connections")) << e;
  temp_file ini{"[api]\nlisen = \"127.0.0.1:1\"\n"};
  e = error_of([&] { load(ini.path(), fake_env{}); });
  EXPECT_TRUE(contains(e, ":2: unknown key 'lisen' in section [api]")) << e;
  EXPECT_TRUE(contains(e, "did you mean 'listen'")) << e;
  e = error_of([&] { load(std::string{"/nonexistent/api.ini"}, fake_env{}); });
  EXPECT_TRUE(contains(e, "cannot read config file '/nonexistent/api.ini'"))
    << e;
}

TEST(ApiConfig, OptionsListTheConfigFileAndTheTlsSet) {
  std::string names;
  for (const auto& o : detail::api_options())
    names += std::string{o.name} + " ";
  for (const char* part :
       {"--config", "--listen", "--tokens-file", "--threads", "--connections",
        "--tls-certificate", "--tls-key", "--tls-ca-file", "--tls-ca-path",
        "--tls-passphrase"})
    EXPECT_TRUE(contains(names, part)) << part;
}

TEST(ApiConfig, AWorkersApiSection) {
  temp_file ini{"[worker]\ndomains = [\"payments\"]\n[api]\nlisten = "
                "\"127.0.0.1:8781\"\ntokens-file = \"/etc/t\"\nthreads = 4\n"};
  auto cfg = load({"--config", ini.path()}, fake_env{}.lookup());
  EXPECT_EQ(cfg.api.listen, "127.0.0.1:8781");
  EXPECT_EQ(cfg.api.tokens_file, "/etc/t");
  EXPECT_EQ(cfg.api.threads, 4);
  EXPECT_EQ(cfg.api.connections, 4);
  auto text = describe(cfg);
  EXPECT_TRUE(contains(text, "[api]\nlisten = \"127.0.0.1:8781\"\n")) << text;
  // The command line over the file; off by default.
  cfg = load({"--config", ini.path(), "--api", "127.0.0.1:0",
              "--api-connections", "2"},
             fake_env{{{"CMDBUS_API_THREADS", "5"}}}.lookup());
  EXPECT_EQ(cfg.api.listen, "127.0.0.1:0");
  EXPECT_EQ(cfg.api.connections, 2);
  EXPECT_EQ(cfg.api.threads, 5);
  EXPECT_TRUE(load({"--domain", "p"}, fake_env{}.lookup()).api.listen.empty());
  auto e = error_of([&] {
    load({"--domain", "p", "--api", "127.0.0.1:1", "--api-threads", "0"},
         fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(e, "api-threads (0) must be 1..1024")) << e;
  e = error_of([&] {
    load({"--domain", "p", "--api", "127.0.0.1:1", "--tick"},
         fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(e, "a tick run serves no command API")) << e;
  e = error_of([&] {
    load({"--domain", "p", "--api", "127.0.0.1:1", "--domain-dsn",
          "p=host=elsewhere"},
         fake_env{}.lookup());
  });
  EXPECT_TRUE(contains(e, "run `cmdbus api` for each database")) << e;
  EXPECT_TRUE(contains(worker_help(), "--api-tokens-file"));
}
