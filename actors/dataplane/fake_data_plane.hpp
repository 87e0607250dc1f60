// fake_data_plane: an in-process fabric for tests of everything above the
// data plane (node runtime, actors) without UCX.
//
//   auto fabric = fake_fabric::create();
//   auto a = make_fake_data_plane(fabric, 0), b = make_fake_data_plane(fabric, 1);
//   a->connect(1, b->local_address());  b->connect(0, a->local_address());
//
// It behaves like ucx_data_plane where tests can see it:
//   - each plane has its own delivery thread; the receive handler and send
//     completions run there (same thread affinity as the real one);
//   - the receiver gets its own wire_buffer (a copy made on its thread);
//   - a send completes ok once the receiver's handler has been given the
//     message; when send() returns an error `done` is never called, when it
//     returns ok `done` runs exactly once;
//   - errors: invalid_argument (null buffer, channel >= 2^48), not_found
//     (peer not connected), peer_down (peer shut down or dropped),
//     wire_too_large (above the receiver's max_message_bytes), cancelled
//     (this plane shut down; also pending sends at shutdown()).
//
// Fault injection, on the fabric:
//   - delay: every message waits a random time in [0, max_delay] (fixed seed)
//     before delivery; per (sender, receiver, channel) order still holds, as
//     the real transport guarantees;
//   - drop_peer(p): p is cut off both ways, as if its node died: messages
//     queued for it are discarded (their senders get peer_down), its own
//     pending sends fail with peer_down, and later sends to or from it fail
//     at once;
//   - max_message_bytes per peer (default from fake_fabric_options).
//
// Thread safety: everything may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "actors/dataplane/data_plane.hpp"

namespace hetflow::dataplane {

namespace detail {
class fake_core;
}

struct fake_fabric_options {
  uint64_t max_message_bytes = 1ull << 30;
  std::chrono::microseconds max_delay{0};
  uint64_t seed = 1;
};

class fake_fabric : public std::enable_shared_from_this<fake_fabric> {
public:
  static std::shared_ptr<fake_fabric> create(fake_fabric_options options = {});

  // Random delivery delay in [0, max_delay]; zero turns it off.
  void set_delay(std::chrono::microseconds max_delay, uint64_t seed);
  // Receiver-side bound for `peer` (applies to planes created before or after).
  void set_max_message_bytes(peer_id peer, uint64_t bytes);
  uint64_t max_message_bytes(peer_id peer) const;
  // Simulates the death of `peer`'s node; see the header comment. Permanent
  // for this fabric.
  void drop_peer(peer_id peer);
  bool is_dropped(peer_id peer) const;

  // Used by fake planes. Returns a random delay for one message.
  std::chrono::microseconds next_delay();
  std::shared_ptr<detail::fake_core> find(peer_id peer) const;
  void attach(peer_id peer, std::shared_ptr<detail::fake_core> core);
  void detach(peer_id peer, const detail::fake_core* core);

  explicit fake_fabric(fake_fabric_options options);

private:
  mutable std::mutex mutex_;
  fake_fabric_options options_;
  uint64_t rng_state_;
  std::unordered_map<peer_id, std::weak_ptr<detail::fake_core>> planes_;
  std::unordered_map<peer_id, uint64_t> max_bytes_;
  std::unordered_set<peer_id> dropped_;
};

// Registers `self` on the fabric. A peer id may be live on a fabric only once
// (a second live plane with the same id throws std::invalid_argument: a test
// bug); after shutdown() the id may be reused.
std::unique_ptr<data_plane> make_fake_data_plane(std::shared_ptr<fake_fabric> fabric, peer_id self);

}  // namespace hetflow::dataplane
