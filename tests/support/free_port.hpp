#pragma once

// A TCP port on 127.0.0.1 that a test or the fault harness hands to a
// server it is about to start.

namespace cmdbus::test {

/// Returns a TCP port of 127.0.0.1 that was free a moment ago (bound and
/// released), picked below the kernel's ephemeral range: the servers under
/// test open many outgoing connections, whose local ports come from that
/// range, so a port handed out there (a bind to port 0) could be taken by
/// one of them before the server binds it ("Address already in use").
/// Throws std::runtime_error when no port is free.
int free_port();

} // namespace cmdbus::test
