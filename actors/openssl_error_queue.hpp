#pragma once

// OpenSSL keeps one error queue per thread, and SSL_get_error reads any
// entry in it as the failure of the call it is asked about. Every TLS path
// of cmdbus (node links: actors/tls_transport.cpp; HTTP:
// actors/ops/http_tls.cpp) therefore clears the queue around each call
// into a session, so that an entry another connection left, or one this
// call leaves, is never read as the outcome of a later call.

#include <openssl/err.h>

namespace cmdbus::actors {

/// Clears this thread's OpenSSL error queue now and again when it goes out
/// of scope.
class clean_error_queue {
public:
  clean_error_queue() {
    ERR_clear_error();
  }
  ~clean_error_queue() {
    ERR_clear_error();
  }
  clean_error_queue(const clean_error_queue&) = delete;
  clean_error_queue& operator=(const clean_error_queue&) = delete;
};

} // namespace cmdbus::actors
