#include "cmdbus/actors/tls_transport.hpp"

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/detail/socket_guard.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/stream.hpp>
#include <caf/io/scribe.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/session.hpp>
#include <caf/send.hpp>

#include <openssl/err.h>

#include "cmdbus/actors/openssl_error_queue.hpp"
#include "cmdbus/model/log.hpp"

namespace cmdbus::actors {

namespace {

using caf::io::network::default_multiplexer;
using caf::io::network::native_socket;
using caf::io::network::operation;
using caf::io::network::rw_state;
using caf::openssl::session_ptr;


// CAF's session for a connected (`accepted`: accepted) socket, which starts
// the handshake; null when OpenSSL refuses it (or the certificate files
// became unreadable since the start).
session_ptr new_session(caf::actor_system& sys, native_socket fd,
                        bool accepted) {
  clean_error_queue clean;
  try {
    return caf::openssl::make_session(sys, fd, accepted);
  } catch (const std::exception& e) {
    log::warn("TLS: cannot start a session: {}", e.what());
    return nullptr;
  }
}

// Reads and writes application data through the session, once the
// handshake has completed (the stream's policy).
class tls_policy {
public:
  explicit tls_policy(caf::openssl::session& session) : session_(session) {}

  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    clean_error_queue clean;
    return session_.read_some(result, fd, buf, len);
  }

  rw_state write_some(size_t& result, native_socket fd, const void* buf,
                      size_t len) {
    clean_error_queue clean;
    return session_.write_some(result, fd, buf, len);
  }

  bool must_read_more(native_socket fd, size_t threshold) {
    return session_.must_read_more(fd, threshold);
  }

private:
  caf::openssl::session& session_;
};

// Reports a failed handshake through the stream's read path.
struct failed_policy {
  rw_state read_some(size_t& result, native_socket, void*, size_t) {
    result = 0;
    return rw_state::failure;
  }
  rw_state write_some(size_t& result, native_socket, const void*, size_t) {
    result = 0;
    return rw_state::failure;
  }
  bool must_read_more(native_socket, size_t) {
    return false;
  }
};

// What the handshake needs next.
enum class handshake { done, wants_read, wants_write, failed };

// A TLS connection's stream. Until the handshake has completed it reads
// only for the handshake, subscribes to write events only while the
// handshake itself has something to write, and keeps what its scribe
// flushes (BASP's first message) in the write buffer; afterwards it is
// CAF's stream with the session as its policy.
class tls_stream : public caf::io::network::stream {
public:
  tls_stream(default_multiplexer& mpx, native_socket fd, session_ptr session,
             caf::io::network::stream_manager& owner)
    : stream(mpx, fd), session_(std::move(session)), policy_(*session_),
      owner_(owner) {}

  void handle_event(operation op) override {
    if (established_ || op == operation::propagate_error) {
      handle_event_impl(op, policy_);
      return;
    }
    if (!closed_ && !suspended_)
      advance(op);
  }

  /// Sends the write buffer now, or as soon as the handshake has completed.
  void flush_when_established() {
    if (established_)
      flush(manager_ptr{&owner_});
    else
      flush_wanted_ = true;
  }

  /// Takes up the handshake (at launch and when the scribe returns to the
  /// loop).
  void resume_handshake() {
    suspended_ = false;
    if (!established_ && !closed_)
      advance(std::nullopt);
  }

  /// The scribe left the loop: no events until it returns.
  void suspend_handshake() {
    suspended_ = true;
    handshake_writes(false);
  }

  /// The scribe closes the connection: the handshake stops for good.
  void close_handshake() {
    closed_ = true;
    handshake_writes(false);
  }

  void removed_from_loop(operation op) override {
    // Released last: it may hold the last reference to the scribe that
    // owns this stream.
    manager_ptr keep;
    if (op == operation::write) {
      handshake_writes_ = false;
      keep.swap(handshake_owner_);
    }
    stream::removed_from_loop(op);
  }

private:
  // Drives the handshake one step; `op` is the event that woke it, if any.
  void advance(std::optional<operation> op) {
    switch (step()) {
      case handshake::wants_read: handshake_writes(false); return;
      case handshake::wants_write: handshake_writes(true); return;
      case handshake::failed: {
        if (!op) {
          // Not from an event but from the broker's own call: report it
          // at the next event rather than calling back into the broker.
          report_later_ = true;
          handshake_writes(true);
          return;
        }
        closed_ = true;
        handshake_writes(false);
        // The reader learns of it as of any failed read.
        failed_policy failed;
        handle_event_impl(operation::read, failed);
        return;
      }
      case handshake::done:
        established_ = true;
        handshake_writes(false);
        if (flush_wanted_) {
          flush_wanted_ = false;
          flush(manager_ptr{&owner_});
        }
        // Application data may have come with the handshake's last flight
        // (read within an event only: not inside the broker's own call).
        if (op)
          handle_event_impl(operation::read, policy_);
        return;
    }
  }

  // One step of the handshake. CAF's session advances its handshake in
  // every read and write, and shows what the handshake waits for only in
  // its answers to empty ones: an empty write answers success while the
  // handshake waits to write (indeterminate while it waits to read, or once
  // it has completed), an empty read answers success while it waits for
  // either and indeterminate once it has completed.
  handshake step() {
    if (report_later_)
      return handshake::failed;
    clean_error_queue clean;
    size_t none = 0;
    switch (session_->write_some(none, fd(), nullptr, 0)) {
      case rw_state::failure: return handshake::failed;
      case rw_state::success: return handshake::wants_write;
      case rw_state::indeterminate: break;
    }
    ERR_clear_error();
    switch (session_->read_some(none, fd(), nullptr, 0)) {
      case rw_state::failure: return handshake::failed;
      case rw_state::success: return handshake::wants_read;
      case rw_state::indeterminate: break;
    }
    return handshake::done;
  }

  // Subscribes to write events for the handshake, or ends that. While
  // subscribed, the stream holds its scribe, as CAF's stream does while it
  // writes: the multiplexer keeps a plain pointer to the stream until it
  // has removed it (removed_from_loop).
  void handshake_writes(bool on) {
    if (on == handshake_writes_)
      return;
    handshake_writes_ = on;
    if (on) {
      handshake_owner_ = manager_ptr{&owner_};
      backend().add(operation::write, fd(), this);
      return;
    }
    backend().del(operation::write, fd(), this);
    // Still waiting to be added (the two cancel out): no removal will come.
    // Its callers run while the broker or the reader holds the scribe.
    if ((eventbf() & caf::io::network::output_mask) == 0)
      handshake_owner_.reset();
  }

  session_ptr session_;
  tls_policy policy_;
  caf::io::network::stream_manager& owner_;
  /// The scribe, while subscribed to write events for the handshake.
  manager_ptr handshake_owner_;
  bool established_ = false;
  bool flush_wanted_ = false;
  bool handshake_writes_ = false;
  bool suspended_ = false;
  bool closed_ = false;
  bool report_later_ = false;
};

// A TLS connection as the BASP broker sees it.
class tls_scribe : public caf::io::scribe {
public:
  tls_scribe(default_multiplexer& mpx, native_socket fd, session_ptr session)
    : scribe(caf::io::network::conn_hdl_from_socket(fd)),
      stream_(mpx, fd, std::move(session), *this) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launched_ = true;
      stream_.start(this);
      stream_.resume_handshake();
    }
  }

  void ack_writes(bool enable) override {
    stream_.ack_writes(enable);
  }

  std::vector<char>& wr_buf() override {
    return stream_.wr_buf();
  }

  std::vector<char>& rd_buf() override {
    return stream_.rd_buf();
  }

  void graceful_shutdown() override {
    stream_.close_handshake();
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }

  void flush() override {
    stream_.flush_when_established();
  }

  std::string addr() const override {
    auto x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string{};
  }

  uint16_t port() const override {
    auto x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }

  void add_to_loop() override {
    stream_.activate(this);
    stream_.resume_handshake();
  }

  void remove_from_loop() override {
    stream_.suspend_handshake();
    stream_.passivate();
  }

private:
  bool launched_ = false;
  tls_stream stream_;
};

// A published port whose connections are tls_scribes.
class tls_doorman : public caf::io::network::doorman_impl {
public:
  using doorman_impl::doorman_impl;

  bool new_connection() override {
    if (detached())
      return false;
    auto& mpx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    caf::detail::socket_guard guard{fd};
    if (!caf::io::network::nonblocking(fd, true))
      return false;
    auto session = new_session(parent()->system(), fd, true);
    if (!session)
      return false;
    auto ptr = caf::make_counted<tls_scribe>(mpx, fd, std::move(session));
    guard.release();
    auto hdl = ptr->hdl();
    parent()->add_scribe(std::move(ptr));
    return doorman::new_connection(&mpx, hdl);
  }
};

// CAF's middleman actor (endpoint cache, BASP handshake, publishing) with
// our connections.
class tls_middleman_impl : public caf::io::middleman_actor_impl {
public:
  tls_middleman_impl(caf::actor_config& cfg, caf::actor broker)
    : middleman_actor_impl(cfg, std::move(broker)) {}

  const char* name() const override {
    return "cmdbus.tls-middleman";
  }

protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host,
                                             uint16_t port) override {
    auto fd = caf::io::network::new_tcp_connection(host, port);
    if (!fd)
      return std::move(fd.error());
    caf::detail::socket_guard guard{*fd};
    if (auto nb = caf::io::network::nonblocking(*fd, true); !nb)
      return std::move(nb.error());
    auto session = new_session(system(), *fd, false);
    if (!session)
      return caf::make_error(caf::sec::cannot_connect_to_node);
    auto ptr = caf::make_counted<tls_scribe>(mpx(), *fd, std::move(session));
    guard.release();
    return caf::io::scribe_ptr{std::move(ptr)};
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr,
                                           bool reuse) override {
    auto fd = caf::io::network::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    return caf::io::doorman_ptr{caf::make_counted<tls_doorman>(mpx(), *fd)};
  }

private:
  default_multiplexer& mpx() {
    return static_cast<default_multiplexer&>(system().middleman().backend());
  }
};

} // namespace

caf::io::middleman_actor tls_middleman(caf::actor_system& sys) {
  static std::mutex mtx;
  std::lock_guard<std::mutex> guard{mtx};
  auto name = caf::atom("CmdbusTLS");
  if (auto ptr = sys.registry().get(name))
    return caf::actor_cast<caf::io::middleman_actor>(std::move(ptr));
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(
    caf::atom("BASP"));
  auto mm = sys.spawn<tls_middleman_impl, caf::detached + caf::hidden>(
    std::move(broker));
  // The system waits for its detached actors after it has stopped its
  // modules. The OpenSSL manager's stop kills its own middleman actor;
  // this one goes with it (a middleman actor ignores exit messages of
  // other reasons) and leaves the registry, whose reference would
  // otherwise keep its thread waiting for good.
  sys.registry().put(name, caf::actor_cast<caf::strong_actor_ptr>(mm));
  auto ssl = sys.openssl_manager().actor_handle();
  caf::actor_cast<caf::abstract_actor*>(ssl)->attach_functor(
    [&sys, name, mm](const caf::error&) {
      sys.registry().erase(name);
      caf::anon_send_exit(mm, caf::exit_reason::kill);
    });
  return mm;
}

} // namespace cmdbus::actors
