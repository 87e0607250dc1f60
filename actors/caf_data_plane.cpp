#include "actors/caf_data_plane.hpp"

#include <cstring>
#include <map>
#include <mutex>

#include "actors/caf_types.hpp"
#include "actors/log.hpp"

namespace hetflow::actors {

struct caf_data_plane::impl {
  dataplane::peer_id self;
  uint64_t max_bytes;
  mutable std::mutex mu;
  std::map<dataplane::peer_id, caf::actor> peers;
  dataplane::receive_handler handler;
  dataplane::data_plane_stats stats;
  bool stopped = false;
};

caf_data_plane::caf_data_plane(dataplane::peer_id self, uint64_t max_message_bytes)
    : impl_(std::make_unique<impl>()) {
  impl_->self = self;
  impl_->max_bytes = max_message_bytes;
}

caf_data_plane::~caf_data_plane() { shutdown(); }

void caf_data_plane::set_peer_actor(dataplane::peer_id peer, const caf::actor& node_actor) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->peers[peer] = node_actor;
}

status caf_data_plane::connect(dataplane::peer_id, std::span<const char>) {
  // Nothing to do: the control plane's connection is the transport.
  return {};
}

void caf_data_plane::set_receive_handler(dataplane::receive_handler handler) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->handler = std::move(handler);
}

status caf_data_plane::send(dataplane::peer_id peer, dataplane::channel_id channel,
                            wire_buffer_ref msg, dataplane::send_completion done) {
  caf::actor dest;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->stopped) return make_error(errc::cancelled, "caf data plane is shut down");
    auto it = impl_->peers.find(peer);
    if (it == impl_->peers.end())
      return make_error(errc::not_found, "caf data plane: no peer " + std::to_string(peer));
    dest = it->second;
    impl_->stats.messages_sent++;
    impl_->stats.bytes_sent += msg->size();
  }
  // TODO(perf): CAF 0.17 copies a message on send and again in BASP; this
  // path exists for correctness and as the fallback, not for speed.
  std::vector<char> bytes(msg->size());
  if (!bytes.empty()) std::memcpy(bytes.data(), msg->data(), msg->size());
  caf::anon_send(dest, dp_atom::value, uint32_t{impl_->self}, uint64_t{channel}, std::move(bytes));
  if (done) done(status{});
  return {};
}

void caf_data_plane::deliver(dataplane::peer_id from, dataplane::channel_id channel,
                             const std::vector<char>& bytes) {
  dataplane::receive_handler h;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->stopped) return;
    if (bytes.size() > impl_->max_bytes) {
      log_error("caf data plane: dropped a " + std::to_string(bytes.size()) +
                "-byte message from peer " + std::to_string(from) + ": over the " +
                std::to_string(impl_->max_bytes) + "-byte limit (max_message)");
      return;
    }
    impl_->stats.messages_received++;
    impl_->stats.bytes_received += bytes.size();
    h = impl_->handler;
  }
  wire_buffer buf(bytes.size());
  if (!bytes.empty()) std::memcpy(buf.data(), bytes.data(), bytes.size());
  if (h) h(from, channel, std::move(buf));
}

uint64_t caf_data_plane::max_message_bytes() const { return impl_->max_bytes; }

dataplane::data_plane_stats caf_data_plane::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->stats;
}

void caf_data_plane::shutdown() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->stopped = true;
  impl_->peers.clear();
  impl_->handler = nullptr;
}

}  // namespace hetflow::actors
