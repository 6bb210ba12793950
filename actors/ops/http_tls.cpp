#include "cmdbus/actors/ops/http_tls.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "cmdbus/actors/openssl_error_queue.hpp"

namespace cmdbus::http_tls {

namespace {

using actors::clean_error_queue;

/// The first entry of the error queue, in words ("" when empty).
std::string queued_error() {
  auto code = ERR_peek_error();
  if (code == 0)
    return {};
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

SSL_CTX* ctx_of(void* p) {
  return static_cast<SSL_CTX*>(p);
}

SSL* ssl_of(void* p) {
  return static_cast<SSL*>(p);
}

/// Hands OpenSSL the passphrase of an encrypted key (`user` is the
/// tls_config's passphrase, set only while the key is read).
int passphrase_of(char* buf, int size, int, void* user) {
  if (user == nullptr || size <= 0)
    return 0;
  const auto& text = *static_cast<const std::string*>(user);
  auto n = static_cast<int>(std::min<size_t>(text.size(),
                                             static_cast<size_t>(size)));
  std::memcpy(buf, text.data(), static_cast<size_t>(n));
  return n;
}

} // namespace

context::context(const config::tls_config& tls) {
  clean_error_queue clean;
  auto* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr)
    throw std::runtime_error("TLS: cannot make a server context: "
                             + queued_error());
  ctx_ = ctx;
  auto fail = [&](const std::string& what) {
    auto why = queued_error();
    SSL_CTX_free(ctx);
    ctx_ = nullptr;
    return std::runtime_error("TLS: " + what + (why.empty() ? "" : ": " + why));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Every connection makes a full handshake: no state kept between them,
  // and nothing written after the handshake has completed.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);
  // A client that closes without a close_notify (most do, after their
  // answer) ends its stream; it is no error.
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Writes go on where a partial one stopped, from wherever the caller's
  // buffer is (the same bytes).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE
                          | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.certificate.c_str()) != 1)
    throw fail("cannot use the certificate " + tls.certificate);
  SSL_CTX_set_default_passwd_cb(ctx, passphrase_of);
  SSL_CTX_set_default_passwd_cb_userdata(
    ctx, const_cast<std::string*>(&tls.passphrase));
  auto key_ok = SSL_CTX_use_PrivateKey_file(ctx, tls.key.c_str(),
                                            SSL_FILETYPE_PEM)
                == 1;
  // The passphrase is not kept.
  SSL_CTX_set_default_passwd_cb_userdata(ctx, nullptr);
  // (OpenSSL compares the key with the certificate as it takes it.)
  if (!key_ok && ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
    throw fail("the key " + tls.key + " does not match the certificate "
               + tls.certificate);
  if (!key_ok)
    throw fail("cannot use the key " + tls.key
               + (tls.passphrase.empty()
                    ? " (an encrypted key needs tls-passphrase)"
                    : " (or its passphrase is wrong)"));
  if (SSL_CTX_check_private_key(ctx) != 1)
    throw fail("the key " + tls.key + " does not match the certificate "
               + tls.certificate);
  if (!tls.ca_file.empty() || !tls.ca_path.empty()) {
    const char* file = tls.ca_file.empty() ? nullptr : tls.ca_file.c_str();
    const char* path = tls.ca_path.empty() ? nullptr : tls.ca_path.c_str();
    if (SSL_CTX_load_verify_locations(ctx, file, path) != 1)
      throw fail("cannot use the CA certificates of "
                 + (file != nullptr ? tls.ca_file : tls.ca_path));
    // The CAs the clients are asked for.
    if (file != nullptr)
      if (auto* names = SSL_load_client_CA_file(file); names != nullptr)
        SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
    verify_clients_ = true;
  }
}

context::~context() {
  if (ctx_ != nullptr)
    SSL_CTX_free(ctx_of(ctx_));
}

session::session(const context& ctx, int fd) {
  clean_error_queue clean;
  auto* ssl = SSL_new(ctx_of(ctx.native()));
  if (ssl == nullptr)
    throw std::runtime_error("TLS: cannot make a session: " + queued_error());
  ssl_ = ssl;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    ssl_ = nullptr;
    throw std::runtime_error("TLS: cannot make a session: " + queued_error());
  }
  SSL_set_accept_state(ssl);
}

session::~session() {
  if (ssl_ != nullptr)
    SSL_free(ssl_of(ssl_));
}

wants session::outcome(int rc, const char* what) {
  auto err = SSL_get_error(ssl_of(ssl_), rc);
  switch (err) {
    case SSL_ERROR_WANT_READ: return wants::read;
    case SSL_ERROR_WANT_WRITE: return wants::write;
    case SSL_ERROR_ZERO_RETURN:
      failure_ = "the client closed the connection";
      peer_left_ = true;
      break;
    case SSL_ERROR_SYSCALL:
      peer_left_ = errno == 0 || errno == ECONNRESET;
      failure_ = std::string{what} + ": "
                 + (errno != 0 ? std::strerror(errno)
                               : "the client closed the connection");
      break;
    default: {
      auto code = ERR_peek_error();
      plain_http_ = ERR_GET_LIB(code) == ERR_LIB_SSL
                    && (ERR_GET_REASON(code) == SSL_R_HTTP_REQUEST
                        || ERR_GET_REASON(code) == SSL_R_HTTPS_PROXY_REQUEST);
      auto why = queued_error();
      failure_ = std::string{what} + ": "
                 + (why.empty() ? "protocol error" : why);
    }
  }
  failed_ = true;
  return wants::nothing;
}

wants session::handshake() {
  if (established_ || failed_)
    return wants::nothing;
  clean_error_queue clean;
  errno = 0;
  auto rc = SSL_do_handshake(ssl_of(ssl_));
  if (rc == 1) {
    established_ = true;
    return wants::nothing;
  }
  return outcome(rc, "handshake failed");
}

ssize_t session::read(char* buf, size_t size, wants& next) {
  next = wants::nothing;
  if (failed_)
    return -1;
  clean_error_queue clean;
  errno = 0;
  size_t n = 0;
  auto rc = SSL_read_ex(ssl_of(ssl_), buf, size, &n);
  if (rc == 1)
    return static_cast<ssize_t>(n);
  auto err = SSL_get_error(ssl_of(ssl_), rc);
  if (err == SSL_ERROR_ZERO_RETURN
      || (err == SSL_ERROR_SYSCALL && errno == 0))
    return 0;
  next = outcome(rc, "read failed");
  return -1;
}

ssize_t session::write(const char* buf, size_t size, wants& next) {
  next = wants::nothing;
  if (failed_)
    return -1;
  clean_error_queue clean;
  errno = 0;
  size_t n = 0;
  auto rc = SSL_write_ex(ssl_of(ssl_), buf, size, &n);
  if (rc == 1)
    return static_cast<ssize_t>(n);
  next = outcome(rc, "write failed");
  return -1;
}

bool session::peer_closed() {
  if (failed_)
    return true;
  if (!established_)
    return false;
  clean_error_queue clean;
  errno = 0;
  char byte = 0;
  size_t n = 0;
  auto rc = SSL_peek_ex(ssl_of(ssl_), &byte, 1, &n);
  if (rc == 1)
    return false;
  auto err = SSL_get_error(ssl_of(ssl_), rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
    return false;
  if (err != SSL_ERROR_ZERO_RETURN
      && !(err == SSL_ERROR_SYSCALL && errno == 0))
    failed_ = true;
  return true;
}

void session::close() {
  if (!established_ || failed_ || closed_)
    return;
  closed_ = true;
  clean_error_queue clean;
  SSL_shutdown(ssl_of(ssl_));
}

} // namespace cmdbus::http_tls
