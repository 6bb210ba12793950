#include "cmdbus/actors/worker/listener.hpp"

#include <chrono>

namespace cmdbus::actors {

listener::listener(std::string who, std::string dsn, std::string channel,
                   std::function<void()> wake)
  : channel_(std::move(channel)), wake_(std::move(wake)),
    session_(std::move(who), options(std::move(dsn)), nullptr),
    thread_([this] { loop(); }) {
  // nop
}

listener::~listener() {
  stop_ = true;
  thread_.join();
}

session_options listener::options(std::string dsn) {
  session_options opts;
  opts.dsn = std::move(dsn);
  opts.statement_timeout = std::nullopt;
  opts.connect_timeout = std::chrono::seconds{5};
  opts.application_name = "cmdbus-listener";
  opts.max_backoff = std::chrono::milliseconds{5000};
  return opts;
}

void listener::loop() {
  while (!stop_) {
    try {
      auto& conn = session_.get();
      conn.listen(channel_);
      session_.succeeded();
      // Anything sent while we were not listening is picked up here.
      wake_();
      while (!stop_) {
        if (!conn.wait_for_notifications(std::chrono::milliseconds{250})
               .empty())
          wake_();
      }
    } catch (const std::exception& e) {
      // A new connection after any failure: a LISTEN is not kept across
      // a broken session.
      auto delay = session_.failed(e);
      session_.close();
      auto until = std::chrono::steady_clock::now() + delay;
      // Stay responsive to stop while backing off.
      while (!stop_ && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
  }
  session_.close();
}

} // namespace cmdbus::actors
