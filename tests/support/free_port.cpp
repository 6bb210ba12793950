#include "tests/support/free_port.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>

namespace cmdbus::test {

int free_port() {
  int ephemeral_low = 32768;
  {
    std::ifstream range{"/proc/sys/net/ipv4/ip_local_port_range"};
    int low = 0;
    if (range >> low && low > 20000)
      ephemeral_low = low;
  }
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick{10000, ephemeral_low - 1};
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      throw std::runtime_error("free_port: socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(pick(rng)));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (bound)
      return ntohs(addr.sin_port);
  }
  throw std::runtime_error("free_port: no free port below the ephemeral range");
}

} // namespace cmdbus::test
