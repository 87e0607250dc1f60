// Helpers shared by the data plane suites: pairs of connected planes for each
// implementation, an inbox that records arrivals, a completion recorder, and
// deterministic payloads with checksums.
#pragma once

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "actors/dataplane/data_plane.hpp"
#include "actors/dataplane/fake_data_plane.hpp"
#include "actors/dataplane/ucx_data_plane.hpp"

namespace hetflow {
// Lets BOOST_CHECK_EQUAL print error codes (Boost.Test's customisation point,
// so it cannot clash with an operator<< that schemas/ may add).
inline std::ostream& boost_test_print_type(std::ostream& os, errc code) { return os << to_string(code); }
}  // namespace hetflow

namespace hetflow::dataplane::testing {

using namespace std::chrono_literals;

// Deterministic bytes: splitmix64 of (seed, word index).
inline wire_buffer_ref make_payload(std::size_t bytes, uint64_t seed) {
  auto buf = std::make_shared<wire_buffer>(bytes);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(buf->data() + i, &z, 8);
  }
  for (; i < bytes; ++i) buf->data()[i] = static_cast<std::byte>(i * 31 + seed);
  return buf;
}

// FNV-1a over 8-byte words (fast enough for 64 MiB), then the tail.
inline uint64_t checksum(const std::byte* p, std::size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
  return h ^ n;
}
inline uint64_t checksum(const wire_buffer& b) { return checksum(b.data(), b.size()); }

struct arrival {
  peer_id from;
  channel_id channel;
  wire_buffer msg;
};

class inbox {
public:
  void install(data_plane& plane) {
    plane.set_receive_handler([this](peer_id from, channel_id ch, wire_buffer msg) {
      std::lock_guard<std::mutex> lock(mutex_);
      arrivals_.push_back(arrival{from, ch, std::move(msg)});
      cv_.notify_all();
    });
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return arrivals_.size() >= n; });
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return arrivals_.size();
  }
  std::vector<arrival> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(arrivals_);
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<arrival> arrivals_;
};

class completions {
public:
  send_completion make() {
    return [this](status s) {
      std::lock_guard<std::mutex> lock(mutex_);
      results_.push_back(std::move(s));
      cv_.notify_all();
    };
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return results_.size() >= n; });
  }
  std::vector<status> results() {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_.size();
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<status> results_;
};

// Implementation names the contract suite runs over.
inline const std::vector<std::string>& implementations() {
  static const std::vector<std::string> impls = {"fake", "ucx:sm,self", "ucx:tcp,self", "ucx-none:tcp,self"};
  return impls;
}

struct plane_pair {
  std::shared_ptr<fake_fabric> fabric;  // fake only
  std::unique_ptr<data_plane> a;        // peer 0
  std::unique_ptr<data_plane> b;        // peer 1
};

inline std::unique_ptr<data_plane> make_plane(const std::string& impl, peer_id self, uint64_t max_bytes,
                                              const std::shared_ptr<fake_fabric>& fabric,
                                              ucx_options base = {}) {
  if (impl == "fake") {
    fabric->set_max_message_bytes(self, max_bytes);
    return make_fake_data_plane(fabric, self);
  }
  // "ucx:TLS" uses ucx_error_mode::peer, "ucx-none:TLS" ucx_error_mode::none.
  if (impl.rfind("ucx-none:", 0) == 0) {
    base.error_mode = ucx_error_mode::none;
    base.tls = impl.substr(9);
  } else {
    BOOST_REQUIRE_MESSAGE(impl.rfind("ucx:", 0) == 0, "unknown implementation " << impl);
    base.tls = impl.substr(4);
  }
  base.max_message_bytes = max_bytes;
  base.self_peer = self;
  auto plane = make_ucx_data_plane(base);
  BOOST_REQUIRE_MESSAGE(plane.has_value(),
                        "UCX cannot create transport '" << base.tls << "' in this environment: "
                                                        << plane.error().to_string());
  return std::move(plane).value();
}

// Two planes (peers 0 and 1) connected both ways.
inline plane_pair make_connected_pair(const std::string& impl, uint64_t max_a = 1ull << 30,
                                      uint64_t max_b = 1ull << 30, ucx_options base = {}) {
  plane_pair p;
  p.fabric = fake_fabric::create();
  p.a = make_plane(impl, 0, max_a, p.fabric, base);
  p.b = make_plane(impl, 1, max_b, p.fabric, base);
  status s = p.a->connect(1, p.b->local_address());
  BOOST_REQUIRE_MESSAGE(s.ok(), impl << ": peer 0 cannot connect to peer 1: " << s.to_string());
  s = p.b->connect(0, p.a->local_address());
  BOOST_REQUIRE_MESSAGE(s.ok(), impl << ": peer 1 cannot connect to peer 0: " << s.to_string());
  return p;
}

}  // namespace hetflow::dataplane::testing
