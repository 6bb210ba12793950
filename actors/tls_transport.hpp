#pragma once

// The TLS connections of the middleman: our own scribes and doormen around
// the OpenSSL sessions of CAF 0.17.6's OpenSSL module (caf::openssl), used
// in place of that module's, because these misbehave under faults:
//
// - Handshake spin. BASP writes its first message as soon as a connection
//   exists, and the module's scribe subscribes to write events while the
//   TLS handshake still waits for the peer: SSL_connect / SSL_accept answer
//   SSL_ERROR_WANT_READ, which its session reports as a successful write of
//   0 bytes, so the stream stays subscribed to an always writable socket
//   and the multiplexer thread loops at 100 % until the peer answers. A
//   peer that accepts and never answers (stopped with SIGSTOP, a hung host)
//   keeps it spinning forever: BASP's close of the connection waits for the
//   write buffer to drain first, and that never happens. A worker spun
//   while its node was frozen (every reconnection attempt left such a
//   connection behind), `cmdbus cluster status` never exited (its
//   multiplexer never became idle), and a node spun for every peer that
//   connected to its port and sent nothing (BASP's first message goes out
//   from the accepting side too).
// - Shared error queue. OpenSSL keeps one error queue per thread, and
//   SSL_get_error reports any entry in it as the failure of the call it is
//   asked about. The module never clears the queue: the only calls that
//   would (in its log statements) are compiled out of Debian's build. When
//   one peer's connection fails (kill -9: "unexpected eof while reading"),
//   its entry stays on the multiplexer thread, and the next read of another,
//   healthy connection that would block (SSL_ERROR_WANT_READ) is reported
//   as a failure: that connection is closed too, its pools lost.
//
// Here, a connection writes nothing before its handshake has completed (the
// stream subscribes to write events only when the handshake itself wants to
// write), and every OpenSSL call is preceded and followed by clearing the
// thread's error queue, as OpenSSL requires for SSL_get_error to be
// meaningful. The certificates, the peer checks and the ciphers stay those
// of CAF's session (caf::openssl::make_session, from the openssl.*
// settings); so do the wire and the BASP handshake.
//
// Only actor code includes this (CAF headers).

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

namespace cmdbus::actors {

/// The middleman actor for TLS connections of `sys`, which must have been
/// configured with the OpenSSL manager (configure_network with TLS): it
/// connects (connect_atom), publishes (publish_atom) and closes ports
/// (close_atom) like CAF's, through the scribes and doormen described above.
/// Spawned at the first call (one per actor system, thread-safe; detached,
/// as CAF's: a connection's TCP connect blocks) and stopped with the OpenSSL
/// manager when the system shuts down.
caf::io::middleman_actor tls_middleman(caf::actor_system& sys);

} // namespace cmdbus::actors
