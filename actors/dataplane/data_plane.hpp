// data_plane: moves whole wire messages (one wire_buffer each) between the
// nodes of a cluster. CAF carries control; the data plane carries bulk
// tensors.
//
// Implementations:
//   ucx_data_plane   (ucx_data_plane.hpp)  shared memory / CMA / TCP / RDMA, chosen by UCX
//   caf_data_plane   (actors/caf_data_plane.hpp)  fallback through CAF's BASP
//   fake_data_plane  (fake_data_plane.hpp) in-process fabric for tests
//
// Peers are identified by their index in the topology (nodes[i] -> peer i).
// A message is addressed to a 64-bit `channel` the receiver chose (the node
// runtime maps channels to local actors).
//
//   sender actor --send(peer, channel, buf)--> [progress thread] ==wire==>
//   [peer's progress thread] --on_receive(from, channel, buf)--> actor mailbox
//
// Thread affinity: send() and connect() may be called from any thread.
// The receive handler and send completions run on the implementation's own
// progress thread: keep them short (hand off to an actor, never block).
//
// Ownership: send() keeps the wire_buffer_ref alive until the bytes have left
// (or were copied by the transport); the caller may drop its reference at once.
// Ordering: messages from one sender to one (peer, channel) arrive in send order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::dataplane {

using peer_id = uint32_t;
using channel_id = uint64_t;

// Runs on the progress thread when a message has fully arrived.
using receive_handler = std::function<void(peer_id from, channel_id channel, wire_buffer msg)>;
// Runs on the progress thread when a send finished (ok) or failed.
using send_completion = std::function<void(status)>;

struct data_plane_stats {
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_received = 0;
};

class data_plane {
public:
  virtual ~data_plane() = default;

  // "ucx", "caf" or "fake" (plus detail, e.g. "ucx(sm,self)").
  virtual std::string name() const = 0;

  // Opaque bytes a peer needs to connect to this node; sent in the hello.
  virtual std::vector<char> local_address() const = 0;

  // Must be called once per peer before sending to it.
  virtual status connect(peer_id peer, std::span<const char> remote_address) = 0;

  // Installs the handler for arriving messages. Call before any peer sends.
  virtual void set_receive_handler(receive_handler handler) = 0;

  // Queues `msg` for (peer, channel). Returns an error at once for an unknown
  // peer or a stopped data plane; transfer errors go to `done`.
  virtual status send(peer_id peer, channel_id channel, wire_buffer_ref msg,
                      send_completion done = {}) = 0;

  // Largest message this data plane accepts from peers (receiver's bound).
  virtual uint64_t max_message_bytes() const = 0;

  virtual data_plane_stats stats() const = 0;

  // Stops the progress thread and closes every endpoint. Idempotent. Pending
  // sends complete with errc::cancelled.
  virtual void shutdown() = 0;
};

}  // namespace hetflow::dataplane
