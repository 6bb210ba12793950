#include "cmdbus/actors/ops/http_connection.hpp"

#include <cctype>
#include <cstdlib>

#include <netdb.h>
#include <unistd.h>

namespace cmdbus::http_conn {

namespace {

const char* reason_of(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

/// A short answer of the front's own, whole.
std::string front_answer(int status, bool json) {
  std::string body = std::string{reason_of(status)} + "\n";
  if (json) {
    std::string code = reason_of(status);
    for (auto& c : code)
      c = c == ' ' ? '_' : static_cast<char>(std::tolower(c));
    body = "{\"error\":{\"code\":\"" + code + "\",\"message\":\""
           + reason_of(status) + "\"}}\n";
  }
  std::string text = "HTTP/1.1 " + std::to_string(status) + " "
                     + reason_of(status) + "\r\nContent-Type: "
                     + (json ? "application/json" : "text/plain")
                     + "\r\nContent-Length: " + std::to_string(body.size())
                     + "\r\nConnection: close\r\n"
                     + (status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n"
                     + body;
  return text;
}

} // namespace

int millis_until(clock::time_point t, clock::time_point now) {
  auto ms = std::chrono::duration_cast<milliseconds>(t - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

std::string lowercase(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

void send_now(connection& c, std::string_view text) {
  if (!c.tls) {
    ::send(c.fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return;
  }
  if (!c.tls->established())
    return;
  http_tls::wants next;
  for (size_t done = 0; done < text.size();) {
    auto n = c.tls->write(text.data() + done, text.size() - done, next);
    if (n <= 0)
      return;
    done += static_cast<size_t>(n);
  }
}

void send_answer(int fd, int status, bool json) {
  auto text = front_answer(status, json);
  ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void send_answer(connection& c, int status, bool json) {
  send_now(c, front_answer(status, json));
}

void close_socket(int fd) {
  char buf[4096];
  for (size_t total = 0; total < 65536;) {
    auto n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0)
      break;
    total += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

void close_connection(connection& c) {
  if (c.tls)
    c.tls->close();
  close_socket(c.fd);
}

ssize_t read_some(connection& c, char* buf, size_t size) {
  if (!c.tls)
    return ::recv(c.fd, buf, size, MSG_DONTWAIT);
  http_tls::wants next;
  auto n = c.tls->read(buf, size, next);
  c.wants_write = false;
  if (n < 0 && !c.tls->failed()) {
    c.wants_write = next == http_tls::wants::write;
    errno = EAGAIN;
  } else if (n < 0) {
    errno = EPROTO;
  }
  return n;
}

void address_of(const sockaddr_storage& addr, socklen_t len, std::string& ip,
                int& port) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host,
                    sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV)
      == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

} // namespace cmdbus::http_conn
