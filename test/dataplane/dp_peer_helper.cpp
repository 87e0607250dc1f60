// A peer in its own process, for ucx_data_plane_test's peer-death cases.
//
//   dp_peer_helper TLS SELF_ID PEER_ID peer|none [flood|stranger]
//   stdout: "<hex address of this plane>\n", later "ready\n"
//   stdin:  "<hex address of the peer>\n"
// Then it receives (and discards) messages until it is killed or stdin
// closes; with "flood" it also sends 16 MiB messages to the peer, 4 at a time.
// peer|none is the ucx_error_mode (it must match the other side's).
//
// "stranger" (it_auth_secret): a process that reached a node's data-plane
// port without the cluster secret. It sends the peer, on channels 0..3, a
// well-formed envelope built with a made-up data-plane token and 64 KiB of
// garbage, prints "sent", and when stdin closes shuts down, which sends a
// goodbye under SELF_ID (a node it pretends to be) with its made-up token.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <string>

#include "actors/dataplane/ucx_data_plane.hpp"
#include "schemas/tensor_codec.hpp"

using namespace hetflow::dataplane;

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s TLS SELF_ID PEER_ID peer|none [flood|stranger]\n", argv[0]);
    return 2;
  }
  ucx_options o;
  o.tls = argv[1];
  o.self_peer = static_cast<uint32_t>(std::atoi(argv[2]));
  auto peer = static_cast<peer_id>(std::atoi(argv[3]));
  o.error_mode = std::string(argv[4]) == "none" ? ucx_error_mode::none : ucx_error_mode::peer;
  const std::string mode = argc == 6 ? argv[5] : "";
  if (mode == "stranger") {
    o.control_token = 0x5eed5eed5eed5eedull;
    hetflow::schemas::set_wire_token(o.control_token);
  }
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
  if (mode == "stranger") {
    for (channel_id ch = 0; ch < 4; ++ch) {
      hetflow::schemas::message_builder b({1, 0, "n" + std::to_string(o.self_peer), "stranger"},
                                          {hetflow::schemas::tensor_meta{hetflow::dtype::u8, {16}}});
      std::memset(b.tensor_data(0).data(), 0x42, 16);
      auto envelope = std::make_shared<const hetflow::wire_buffer>(std::move(b).finish());
      auto garbage = std::make_shared<hetflow::wire_buffer>(std::size_t{64} << 10);
      std::memset(garbage->data(), 0x5a, garbage->size());
      if (!(*plane)->send(peer, ch, envelope).ok() || !(*plane)->send(peer, ch, garbage).ok()) return 1;
    }
    std::cout << "sent" << std::endl;
  } else if (mode == "flood") {
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
