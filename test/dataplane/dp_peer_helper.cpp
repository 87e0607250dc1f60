// A peer in its own process, for ucx_data_plane_test's peer-death cases.
//
//   dp_peer_helper TLS SELF_ID PEER_ID peer|none [flood]
//   stdout: "<hex address of this plane>\n", later "ready\n"
//   stdin:  "<hex address of the peer>\n"
// Then it receives (and discards) messages until it is killed or stdin
// closes; with "flood" it also sends 16 MiB messages to the peer, 4 at a time.
// peer|none is the ucx_error_mode (it must match the other side's).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <string>

#include "actors/dataplane/ucx_data_plane.hpp"

using namespace hetflow::dataplane;

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s TLS SELF_ID PEER_ID peer|none [flood]\n", argv[0]);
    return 2;
  }
  ucx_options o;
  o.tls = argv[1];
  o.self_peer = static_cast<uint32_t>(std::atoi(argv[2]));
  auto peer = static_cast<peer_id>(std::atoi(argv[3]));
  o.error_mode = std::string(argv[4]) == "none" ? ucx_error_mode::none : ucx_error_mode::peer;
  auto plane = make_ucx_data_plane(o);
  if (!plane) {
    std::fprintf(stderr, "dp_peer_helper: %s\n", plane.error().to_string().c_str());
    return 1;
  }
  static const char* hex = "0123456789abcdef";
  std::string line;
  for (char c : (*plane)->local_address()) {
    line += hex[(static_cast<unsigned char>(c) >> 4) & 15];
    line += hex[static_cast<unsigned char>(c) & 15];
  }
  std::cout << line << std::endl;
  std::string peer_hex;
  if (!std::getline(std::cin, peer_hex)) return 1;
  std::vector<char> addr(peer_hex.size() / 2);
  for (std::size_t i = 0; i < addr.size(); ++i)
    addr[i] = static_cast<char>(std::stoi(peer_hex.substr(2 * i, 2), nullptr, 16));
  (*plane)->set_receive_handler([](peer_id, channel_id, hetflow::wire_buffer) {});
  auto s = (*plane)->connect(peer, addr);
  if (!s.ok()) {
    std::fprintf(stderr, "dp_peer_helper: %s\n", s.to_string().c_str());
    return 1;
  }
  std::cout << "ready" << std::endl;
  if (argc == 6) {
    auto msg = std::make_shared<hetflow::wire_buffer>(std::size_t{16} << 20);
    std::memset(msg->data(), 7, msg->size());
    std::atomic<int> in_flight{0};
    for (;;) {
      while (in_flight.load() >= 4) usleep(100);
      ++in_flight;
      auto st = (*plane)->send(peer, 77, msg, [&](hetflow::status) { --in_flight; });
      if (!st.ok()) return 1;
    }
  }
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
