// caf_data_plane: the fallback data plane. Wire messages travel as CAF
// messages (std::vector<char>) between node actors over CAF's BASP.
//
// Slower than UCX (CAF allocates and copies per message; measured ~1.4 GB/s at
// 4 MiB here) but needs nothing beyond the control plane. Used when
// `data_plane = "caf"` or when UCX cannot start under `data_plane = "auto"`.
//
//   send(peer, ch, buf) -> copy into vector<char> -> (dp_atom, self, ch, bytes)
//     -> peer's node actor -> deliver(from, ch, bytes) -> copy into an aligned
//     wire_buffer -> receive handler
#pragma once

#include <caf/fwd.hpp>

#include <memory>
#include <vector>

#include "actors/dataplane/data_plane.hpp"

namespace hetflow::actors {

class caf_data_plane final : public dataplane::data_plane {
public:
  caf_data_plane(dataplane::peer_id self, uint64_t max_message_bytes);
  ~caf_data_plane() override;

  // Called once the peer's node actor is known (after the hello).
  void set_peer_actor(dataplane::peer_id peer, const caf::actor& node_actor);
  // Called by this node's actor when (dp_atom, from, channel, bytes) arrives.
  void deliver(dataplane::peer_id from, dataplane::channel_id channel,
               const std::vector<char>& bytes);

  std::string name() const override { return "caf"; }
  std::vector<char> local_address() const override { return {}; }
  status connect(dataplane::peer_id peer, std::span<const char> remote_address) override;
  void set_receive_handler(dataplane::receive_handler handler) override;
  status send(dataplane::peer_id peer, dataplane::channel_id channel, wire_buffer_ref msg,
              dataplane::send_completion done) override;
  uint64_t max_message_bytes() const override;
  dataplane::data_plane_stats stats() const override;
  void shutdown() override;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace hetflow::actors
