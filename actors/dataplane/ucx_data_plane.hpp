// ucx_data_plane: the data plane over UCX 1.13 tag matching (shared memory,
// CMA, TCP or RDMA, whichever UCX selects from `ucx_options::tls`).
//
// One ucp_context, one ucp_worker (UCS_THREAD_MODE_SINGLE) and one progress
// thread per data plane. Every ucp_* call happens on that thread; other
// threads hand it work through a mutex-protected queue plus an eventfd.
//
//   send(peer, ch, buf) --queue--> [progress thread] ucp_tag_send_nbx(ep[peer], tag)
//   [progress thread] ucp_tag_probe_nb(any tag) -> wire_buffer(len)
//                     -> ucp_tag_msg_recv_nbx(into it) -> handler(from, ch, buf)
//
// Tag layout (64 bits):   | sender peer id : 16 | channel : 48 |
// Sender id 0xffff is reserved for control messages (a "goodbye" sent by
// shutdown(), so peers in the same or another process learn at once that this
// node stopped, whatever the transport; heartbeats): 9 bytes, the op and
// ucx_options::control_token. Hence peer ids must be < 0xffff and
// channels < 2^48 (send() rejects larger ones with invalid_argument).
//
// Address (local_address()):  | "HFUX" | version u32 | peer id u32 | error mode u32 |
//   | max_message_bytes u64 | pid, start time, pid namespace, boot id (64 B) |
//   | ucp worker address |
// The receiver's bound travels in the address so send() refuses an oversized
// message at once (wire_too_large). The receiver still enforces it against
// peers that ignore it (see "oversized messages" below). The process identity
// lets a same-host peer watch this process through /proc (see "peer failure").
//
// Progress loop: busy-polls ucp_worker_progress while operations are in
// flight (posted sends, receives being pulled) or something happened within
// `idle_spin` (default 50 us); otherwise arms the worker and sleeps in epoll
// on (worker efd, eventfd) for at most 100 ms, so an idle node does not burn
// a core. It never sleeps with operations in flight: UCX does not signal the
// efd for every event that moves them (a TCP socket turning writable), and
// sleeping there cut TCP bandwidth several-fold in dp_bench.
//
// Ordering: UCX matches messages of one endpoint in send order; receives may
// complete out of order (an eager message overtakes a rendezvous one still
// being pulled), so arrivals are queued per tag (= per (sender, channel)) and
// delivered strictly in probe order.
//
// Oversized messages (length > max_message_bytes, from a peer that ignored the
// bound in our address): the message is received into a 64-byte scratch
// buffer, which UCX completes with UCS_ERR_MESSAGE_TRUNCATED without moving
// the payload (a rendezvous is acknowledged without a transfer; eager
// fragments are discarded). Nothing is delivered and nothing is allocated;
// `ucx_options::on_error` gets wire_too_large naming the peer. The endpoint
// stays up (the peer is misconfigured, not dead). NOTE: the sender's `done`
// then reports ok (UCX saw a completed, truncated receive); only the
// send-side check tells a well-behaved sender.
//
// Peer failure. A peer is marked down when
//   - UCX reports an endpoint error (TCP reset, keepalive timeout), or a send
//     fails with a connection-type error;
//   - its goodbye arrives (orderly shutdown(); not reported to on_error);
//   - (mode-NONE endpoints only, below) every keepalive_interval: /proc shows
//     a same-host peer's process has exited, or a heartbeat (a 1-byte control
//     message) to another peer fails.
// Then its endpoint is force-closed, sends to it still in flight complete
// with peer_down (UCX purges them, or we complete them ourselves), receives
// from it in flight are dropped, and later send() calls return peer_down at
// once. connect() again (e.g. after the peer restarted) replaces the endpoint.
//
// Error-handling mode (ucx_options::error_mode). What UCX 1.13 does, seen
// with ucp_ep_print_info on this machine:
//   - UCP_ERR_HANDLING_MODE_PEER: no rma_bw lanes at all, so rendezvous data
//     goes through active-message copies (no CMA, no TCP put), over one TCP
//     lane; and posix/sysv shared memory is refused ("no peer failure
//     handler"), so same-host peers talk over TCP loopback when the list has
//     tcp, and cannot connect at all with "sm,self".
//   - UCP_ERR_HANDLING_MODE_NONE: sysv + CMA for same-host peers, TCP put
//     zero-copy over every TCP interface (lo and eth0 here) otherwise; UCX
//     reports no endpoint errors, although TCP sends to a dead peer still
//     fail. HAZARD: if a peer dies while we pull a rendezvous message from
//     it over CMA, UCX treats the failed process_vm_readv as unhandled and
//     aborts this process. The same holds if a live peer frees the buffer
//     we are pulling, which is why buffers of sends abandoned towards a
//     mode-NONE peer that may be alive are never freed (a bounded leak, see
//     teardown in the .cpp), and why shutdown() first gives receivers up to
//     1 s to finish pulling.
// ucx_error_mode::peer (default) uses PEER except for a shared-memory-only
// list ("sm,self"), which can only work in NONE; ucx_error_mode::none uses
// NONE everywhere. Mode-NONE peers are watched by us (below). Use peer where
// a peer process may die mid-transfer and this one must survive; none where
// bandwidth matters more (measured in bench/transport/raw/RESULTS.md).
//
// Completion contract (both this and fake_data_plane): when send() returns an
// error, `done` is never called; when it returns ok, `done` is called exactly
// once on the progress thread, at the latest from shutdown().
//
// shutdown(): queued sends complete with cancelled; a goodbye goes to every
// live peer (<= 500 ms); posted receives are cancelled and endpoints
// force-closed; UCX gets <= 1 s to return what is in flight, the rest is
// completed here (cancelled, or peer_down for a peer already down). So it
// returns within ~1.5 s. Called from a handler it only requests the stop;
// the destructor (which must not run on the progress thread) then joins.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/dataplane/data_plane.hpp"
#include "schemas/error.hpp"

namespace hetflow::dataplane {

// How a dead peer is noticed; see "Error-handling mode" above.
enum class ucx_error_mode : uint8_t {
  // UCP_ERR_HANDLING_MODE_PEER where UCX accepts it: UCX reports dead peers
  // and fails their requests instead of treating the failure as fatal.
  // UCX 1.13 then uses no zero-copy rendezvous lanes at all (TCP 4 MiB:
  // ~4.7 GB/s vs ~6.6 in mode none on this machine; same-host peers go over
  // TCP loopback unless the list is shared-memory only).
  peer,
  // UCP_ERR_HANDLING_MODE_NONE everywhere: zero-copy rendezvous (CMA, TCP
  // put, several TCP rails) and shared memory for same-host peers; dead
  // peers are found by our own watch (failed sends, goodbyes, heartbeats,
  // /proc for same-host peers), with the CMA abort hazard described above.
  // Every node of a cluster must use the same mode (UCX refuses to connect
  // mixed modes; connect() reports it).
  none,
  // none where the transport list names no transport that touches a
  // same-host peer's memory (e.g. "tcp,self": zero-copy TCP, and a dead peer
  // makes sends fail instead of aborting this process), peer otherwise
  // (including UCX's default list). Resolved in make_ucx_data_plane.
  automatic,
};

struct ucx_options {
  // UCX transport list, e.g. "sm,self", "tcp,self", "rc,sm,self"; empty means
  // UCX's default (UCX_TLS from the environment, else "all"). Other UCX_*
  // environment variables (UCX_RNDV_THRESH, UCX_NET_DEVICES, ...) still apply.
  std::string tls;
  // UCX_NET_DEVICES unless the environment sets it (net_devices.hpp chooses
  // it from [cluster] ucx_net_devices); empty = UCX's default, every device.
  std::string net_devices;
  // Largest message accepted from a peer (advertised in local_address()).
  uint64_t max_message_bytes = 1ull << 30;
  // This node's peer id (< 0xffff); becomes the top 16 bits of every tag sent.
  uint32_t self_peer = 0;
  // The cluster's data-plane token (schemas::set_wire_token; 0: none). Sent
  // in this plane's control messages (goodbye, heartbeat); with a nonzero
  // token a goodbye that does not carry it is ignored and reported, so a
  // stranger who reaches the port cannot take a peer out of the job. Data
  // messages are checked by the runtime (their envelopes carry the token).
  uint64_t control_token = 0;
  // Errors not tied to one send(): an oversized or failed arrival, a peer
  // going down. Runs on the progress thread. Empty: printed to stderr.
  std::function<void(const status&)> on_error;
  // UCX keepalive period (UCX's default is 20 s), bounding how long a dead
  // peer on a connection-less transport (shared memory) goes unnoticed.
  // Not applied when UCX_KEEPALIVE_INTERVAL is set in the environment.
  std::chrono::milliseconds keepalive_interval{1000};
  // How long the progress thread keeps polling after the last event before
  // it sleeps on the worker's event fd. Waking from that sleep costs tens of
  // microseconds (more for TCP, whose events pass through UCX's async
  // thread), so a window shorter than a round trip makes every message pay
  // it; longer windows burn more CPU on a lightly loaded node.
  std::chrono::microseconds idle_spin{50};
  // Rendezvous-sized arrivals (>= 256 KiB) being pulled at once; later ones
  // wait, in order, until one finishes. Pulling many at once interleaves
  // them (UCX round-robins their segments), so each finishes late and the
  // working set outgrows the caches: 16 at once gave ~9 GB/s over shared
  // memory where 1 gives ~14 (dp_bench, 4 MiB). Small messages on other
  // channels are not held up by this. Applies to mode-NONE peers only
  // (zero-copy rendezvous); see start_receive in the .cpp.
  uint32_t max_active_large_receives = 1;
  ucx_error_mode error_mode = ucx_error_mode::peer;
  // Where arriving messages go. Called on the progress thread with the
  // message's length; must return a buffer whose size() is exactly that
  // (wire_buffer::shrink_to can set the size of a pooled buffer of larger
  // capacity), or throw std::bad_alloc (the message is then drained and
  // reported as out_of_memory). Empty: a fresh wire_buffer, advised onto
  // transparent huge pages from 4 MiB. A fresh buffer costs the kernel's
  // zeroing of every page, which at 64 MiB over shared memory is about a
  // third of the transfer time; a runtime that hands finished buffers back
  // to a pool behind this hook avoids it (dp_bench --recycle).
  std::function<wire_buffer(std::size_t bytes)> receive_buffer_allocator;
  // Test hook: false makes mode-NONE peers on this host be watched by
  // heartbeats only, as peers on other hosts are.
  bool watch_processes = true;
  // Test hook: false skips send()'s check against the receiver's advertised
  // bound, so a test can exercise the receiver's own defence.
  bool check_peer_limit_on_send = true;
};

// Creates the context, the worker and the progress thread. Fails with
// transport_error (naming the transports asked for) when UCX cannot open
// them, and invalid_argument for a self_peer >= 0xffff.
expected<std::unique_ptr<data_plane>> make_ucx_data_plane(const ucx_options& options);

}  // namespace hetflow::dataplane
