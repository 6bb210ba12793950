#include "api/command_api.hpp"

#include <atomic>
#include <mutex>
#include <set>

#include <httplib.h>

#include "api/idempotency.hpp"
#include "api/operations.hpp"
#include "api/request.hpp"
#include "cmdbus/cli/json_out.hpp"
#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/error.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/db/queues.hpp"
#include "cmdbus/model/errors.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::api {

namespace {

using cli::json_out;

std::string error_body(const std::string& code, const std::string& message) {
  json_out out;
  out.begin_object()
    .key("error")
    .begin_object()
    .field("code", code)
    .field("message", message)
    .end_object()
    .end_object();
  return out.text();
}

/// The status of a command as the API shows it.
void write_status(json_out& out, const command_metadata& m, bool final,
                  const std::optional<json>& result) {
  out.begin_object()
    .field("command_id", m.command_id)
    .field("domain", m.domain)
    .field("type", m.command_type)
    .field("status", std::string{to_string(m.status)})
    .field("final", final)
    .field("attempts", m.attempts)
    .field("max_attempts", m.max_attempts)
    .field("correlation_id", m.correlation_id)
    .field("reply_to", m.reply_to)
    .field("batch_id", m.batch_id)
    .field("created_at", m.created_at)
    .field("updated_at", m.updated_at)
    .key("error");
  if (m.last_error_type || m.last_error_code || m.last_error_msg)
    out.begin_object()
      .field("type", m.last_error_type)
      .field("code", m.last_error_code)
      .field("message", m.last_error_msg)
      .end_object();
  else
    out.null();
  out.key("result");
  if (result)
    out.value(*result);
  else
    out.null();
  out.end_object();
}

db::pool_options pool_options_of(const api_settings& s) {
  db::pool_options p;
  p.dsn = s.dsn;
  p.max_size = std::max<size_t>(1, s.connections);
  p.connection.application_name = "cmdbus-api";
  p.connection.pooler = s.pooler;
  p.connection.connect_timeout = std::chrono::seconds{2};
  if (s.pooler != db::pooler_mode::transaction)
    p.connection.statement_timeout = std::chrono::milliseconds{5000};
  // A server that cannot answer at all (its backend stopped, the network
  // holding the packets) runs no statement_timeout: the request hears 503
  // after this bound instead of waiting for TCP's minutes, and the
  // connection is replaced. Above the statement timeout, so that a merely
  // slow statement ends with the server's own error first.
  p.connection.reply_timeout = std::chrono::milliseconds{7000};
  // A request waits for a free connection briefly, then hears 503.
  p.acquire_timeout = std::chrono::milliseconds{2000};
  // Back within two seconds of the database.
  p.backoff_max = std::chrono::milliseconds{2000};
  return p;
}

} // namespace

struct command_api::impl {
  api_settings settings;
  db::pool pool;
  command_bus bus;
  http_server listener;
  httplib::Server& server = listener.routes();
  /// Set when the API stops: waiting GETs answer at once.
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> undeclared{0};
  std::atomic<uint64_t> unavailable{0};
  /// Domains whose queue was seen to exist.
  std::mutex known_mtx;
  std::set<std::string> known_domains;

  explicit impl(api_settings s)
    : settings(std::move(s)), pool(pool_options_of(settings)), bus(pool),
      listener(command_api::limits(settings.threads), "command API") {
    // nop
  }

  void answer(op o, httplib::Response& res, int status, std::string body) {
    if (!declares(o, status)) {
      ++undeclared;
      log::from("api").error("the command API answered {} to {} {}, which "
                             "docs/api.yaml does not declare",
                             status, operations()[size_t(o)].method,
                             operations()[size_t(o)].path);
    }
    res.status = status;
    res.set_content(body, "application/json");
  }

  void fail(op o, httplib::Response& res, int status, const std::string& code,
            const std::string& message) {
    answer(o, res, status, error_body(code, message));
  }

  /// Runs `fn` for a request on `domain`: authenticates, checks the domain,
  /// and turns what `fn` throws into its answer.
  template <class F>
  void serve(op o, const httplib::Request& req, httplib::Response& res,
             const std::string& domain, F fn) {
    try {
      auto verdict = settings.tokens.check(
        req.get_header_value("Authorization"), domain);
      if (verdict == access::missing || verdict == access::unknown) {
        res.set_header("WWW-Authenticate", "Bearer");
        fail(o, res, 401, "unauthorized",
             verdict == access::missing
               ? "a bearer token is required (Authorization: Bearer TOKEN)"
               : "the bearer token is not valid");
        return;
      }
      check_domain(domain);
      if (verdict == access::forbidden) {
        fail(o, res, 403, "forbidden",
             "the token does not grant domain " + domain);
        return;
      }
      fn();
    } catch (const api_error& e) {
      fail(o, res, e.status(), e.code(), e.what());
    } catch (const duplicate_command_error& e) {
      fail(o, res, 409, "duplicate", e.what());
    } catch (const invalid_operation_error& e) {
      fail(o, res, 409, "conflict", e.what());
    } catch (const db::invalid_argument& e) {
      fail(o, res, 400, "invalid_request", e.what());
    } catch (const db::error& e) {
      // Unreachable, too slow, or every connection busy.
      bool busy = e.code() == db::errc::other
                  && std::string_view{e.what()}.find("connection pool")
                       != std::string_view::npos;
      if (e.code() == db::errc::connection
          || e.code() == db::errc::statement_timeout || busy) {
        ++unavailable;
        log::from("api").warn("command API: the database is unavailable: {}",
                              log::one_line(e.what()));
        res.set_header("Retry-After", "1");
        fail(o, res, 503, "database_unavailable",
             "the database is unavailable; try again");
      } else {
        log::from("api").error("command API: {}", log::one_line(e.what()));
        fail(o, res, 500, "database_error", log::one_line(e.what()));
      }
    } catch (const std::exception& e) {
      log::from("api").error("command API: {}", log::one_line(e.what()));
      fail(o, res, 500, "internal_error", log::one_line(e.what()));
    }
  }

  /// Throws api_error 404 unless the domain's command queue exists (a
  /// mistyped domain must not create a queue nobody reads).
  void require_domain(const std::string& domain) {
    {
      std::lock_guard<std::mutex> guard{known_mtx};
      if (known_domains.count(domain) > 0)
        return;
    }
    auto conn = pool.acquire();
    if (!db::queue_exists(*conn, db::command_queue(domain)))
      throw api_error{404, "unknown_domain",
                      "domain " + domain + " has no command queue ("
                        + db::command_queue(domain)
                        + "); a worker or `cmdbus send --create` makes it"};
    std::lock_guard<std::mutex> guard{known_mtx};
    known_domains.insert(domain);
  }

  void send(const httplib::Request& req, httplib::Response& res) {
    auto domain = req.matches[1].str();
    serve(op::send, req, res, domain, [&] {
      auto body = parse_send_body(domain, req.body);
      require_domain(domain);
      auto& r = body.request;
      if (!body.id_given) {
        created(res, domain, bus.send(r));
        return;
      }
      // Sent with the fingerprint of what it decided; an id that exists
      // is a repeat or a conflict. A command removed between the two
      // (retention) is sent anew, once.
      for (int round = 0;; ++round) {
        try {
          created(res, domain, send_recorded(pool, bus, r, body.decided));
          return;
        } catch (const duplicate_command_error&) {
          auto check = check_repeat(pool, bus, r, body.decided);
          if (check.kind == repeat_kind::gone && round == 0)
            continue;
          if (check.kind != repeat_kind::same)
            throw api_error{
              409, "duplicate",
              "command_id " + r.command_id.to_string() + " of domain " + domain
                + " was first used by a different request (its type, data, "
                  "correlation_id, reply_to, max_attempts, priority, "
                  "not_before or delay differ, or it came in a batch): "
                  "repeat that request unchanged, or use a new command_id"};
          auto& m = *check.command;
          json_out out;
          out.begin_object()
            .field("command_id", m.command_id)
            .field("domain", domain)
            .field("msg_id", m.msg_id)
            .field("status", std::string{to_string(m.status)})
            .field("created", false)
            .end_object();
          answer(op::send, res, 200, out.text());
          return;
        }
      }
    });
  }

  /// Answers 201 for a command just sent.
  void created(httplib::Response& res, const std::string& domain,
               const send_result& sent) {
    json_out out;
    out.begin_object()
      .field("command_id", sent.command_id)
      .field("domain", domain)
      .field("msg_id", sent.msg_id)
      .field("status", std::string{"PENDING"})
      .field("created", true)
      .end_object();
    answer(op::send, res, 201, out.text());
  }

  void get(const httplib::Request& req, httplib::Response& res) {
    auto domain = req.matches[1].str();
    serve(op::get, req, res, domain, [&] {
      auto id = parse_command_id(req.matches[2].str());
      std::optional<std::string> wait_text;
      if (req.has_param("wait"))
        wait_text = req.get_param_value("wait");
      auto wait = parse_wait(wait_text);
      auto w = bus.wait_for_final(domain, id, wait, [this] {
        return stopping.load() || http_server::client_gone();
      });
      if (!w.command)
        throw api_error{404, "not_found",
                        "command " + id.to_string() + " not found in domain "
                          + domain};
      auto& m = *w.command;
      std::optional<json> result;
      if (m.status == command_status::completed && m.reply_to) {
        auto conn = pool.acquire();
        result = reply_result(*conn, *m.reply_to, id);
      }
      json_out out;
      write_status(out, m, w.final, result);
      if (!w.final) {
        res.set_header("Retry-After", "1");
        answer(op::get, res, 202, out.text());
      } else {
        answer(op::get, res, m.status == command_status::completed ? 200 : 422,
               out.text());
      }
    });
  }

  void batch(const httplib::Request& req, httplib::Response& res) {
    auto domain = req.matches[1].str();
    serve(op::batch, req, res, domain, [&] {
      auto body = parse_batch_body(req.body);
      require_domain(domain);
      create_batch_options options;
      options.batch_id = body.batch_id;
      options.name = body.name;
      options.custom_data = body.custom_data;
      auto made = create_batch_recorded(pool, bus, domain, body.commands,
                                        body.decided, options);
      json_out out;
      out.begin_object()
        .field("batch_id", made.batch_id)
        .field("domain", domain)
        .field("total", made.total_commands)
        .key("command_ids")
        .begin_array();
      for (auto& c : made.command_results)
        out.value(c.command_id);
      out.end_array().end_object();
      answer(op::batch, res, 201, out.text());
    });
  }

  void routes() {
    server.Get("/healthz",
               [this](const httplib::Request&, httplib::Response& res) {
                 answer(op::health, res, 200, R"({"status":"ok"})");
               });
    constexpr const char* domain = "/v1/domains/([^/]+)";
    server.Post(std::string{domain} + "/commands",
                [this](const httplib::Request& req, httplib::Response& res) {
                  send(req, res);
                });
    server.Get(std::string{domain} + "/commands/([^/]+)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 get(req, res);
               });
    server.Post(std::string{domain} + "/batches",
                [this](const httplib::Request& req, httplib::Response& res) {
                  batch(req, res);
                });
    server.set_error_handler([](const httplib::Request&,
                                httplib::Response& res) {
      if (res.body.empty())
        res.set_content(error_body(res.status == 404 ? "no_such_path" : "error",
                                   res.status == 404
                                     ? "no such path (see docs/api.yaml)"
                                     : "the request failed"),
                        "application/json");
    });
  }
};

command_api::command_api(api_settings settings)
  : impl_(std::make_unique<impl>(std::move(settings))) {
  impl_->routes();
  auto& tls = impl_->settings.tls;
  if (tls.enabled())
    impl_->listener.use_tls(tls);
  impl_->listener.listen(impl_->settings.listen);
  auto host = impl_->settings.listen.host;
  if (host.find(':') != std::string::npos)
    host = "[" + host + "]";
  log::from("api").info(
    "command API on {}://{}:{}/ ({} token(s), {} threads, {} database "
    "connections{})",
    tls.enabled() ? "https" : "http", host, impl_->listener.port(),
    impl_->settings.tokens.size(), impl_->settings.threads,
    impl_->settings.connections,
    !tls.enabled() ? ""
    : tls.ca_file.empty() && tls.ca_path.empty()
      ? ", TLS"
      : ", TLS with client certificates");
  if (!tls.enabled() && !config::is_loopback(impl_->settings.listen.host))
    log::from("api").warn(
      "the command API listens on {} without TLS: its tokens and commands "
      "cross the network in clear text (give it --tls-certificate and "
      "--tls-key, or a TLS proxy in front)",
      impl_->settings.listen.host);
}

command_api::~command_api() {
  impl_->stopping = true;
  impl_->listener.stop();
}

int command_api::port() const noexcept {
  return impl_->listener.port();
}

api_stats command_api::stats() const {
  api_stats s;
  s.listener = impl_->listener.stats();
  s.undeclared = impl_->undeclared.load();
  s.unavailable = impl_->unavailable.load();
  return s;
}

http_limits command_api::limits(size_t threads) {
  http_limits l;
  l.max_connections = 256;
  l.request_timeout = std::chrono::seconds{5};
  l.idle_timeout = std::chrono::seconds{5};
  // A GET that waits answers within max_wait; writing it is quick.
  l.write_timeout = std::chrono::seconds{5};
  l.max_body_bytes = max_body_bytes;
  l.threads = std::max<size_t>(1, threads);
  l.max_waiting = std::min<size_t>(4 * l.threads, 100);
  l.max_connections = std::max<size_t>(256,
                                       l.threads + 1 + 2 * l.max_waiting + 32);
  l.reserved_paths = {"/healthz"};
  l.json_errors = true;
  return l;
}

} // namespace cmdbus::api
