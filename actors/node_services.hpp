// node_services: what an actor may ask of the node it runs on.
//
// One instance per node process, shared by every local actor. Thread-safe:
// actors call it from CAF worker threads.
//
// Wire messages (Cap'n Proto, schemas/tensor_codec.hpp) go by name:
//   send_wire("checker", buf)
//     target on this node  -> the actor gets (wire_atom, from_node, buf): the
//                             same buffer, by reference, never serialized;
//     target on a peer     -> the data plane moves buf's bytes to the peer,
//                             straight into a receive buffer, and the actor
//                             there gets (wire_atom, from_node, buf).
// Control messages go through CAF to the handle that find_actor() returns.
#pragma once

#include <caf/fwd.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

#include "schemas/error.hpp"
#include "schemas/tensor_codec.hpp"
#include "schemas/wire_buffer.hpp"

namespace hetflow::actors {

class node_services {
public:
  virtual ~node_services() = default;

  virtual const std::string& node_name() const = 0;
  virtual int node_index() const = 0;
  // "ucx(sm,self)", "caf", ...
  virtual std::string data_plane_name() const = 0;

  // The handle of a named actor anywhere in the cluster. Valid once the actor
  // has received start_atom; an invalid handle for an unknown name.
  virtual caf::actor find_actor(std::string_view name) const = 0;
  // The node an actor runs on; empty if unknown.
  virtual std::string node_of(std::string_view actor_name) const = 0;

  // Sends one wire message to a named actor (see above). Errors for an unknown
  // target come back at once; transfer errors stop the job with a message
  // naming the peer. `linger`: for a target on another node, wait up to this
  // long for the data plane's send completion before returning (the bytes
  // have left; above UCX's rendezvous size, the receiver has taken them):
  // dataplane::send_and_wait, which says when that helps and where not to
  // use it.
  virtual status send_wire(std::string_view target, wire_buffer_ref msg,
                           std::chrono::microseconds linger = std::chrono::microseconds{0}) = 0;

  // True once node `node` went down and the job goes on without it (only
  // nodes whose loss the job survives: registry.hpp's expendable_nodes; the
  // loss of any other node stops the job). Polled by the actors that take
  // over its work.
  virtual bool node_lost(std::string_view node) const = 0;

  // Becomes true when the job is stopping (a failure elsewhere, a signal).
  // Long computations that cannot read their mailbox poll it.
  virtual const std::atomic<bool>& stopping() const = 0;

  // The receiver's bounds for decoding wire messages from peers.
  virtual const schemas::read_limits& read_limits() const = 0;

  // A local actor reports that it finished (ok or not). `metrics_json` is a
  // JSON object (or empty); it lands in the job report. Call exactly once.
  virtual void report_done(std::string_view actor, bool ok, std::string summary,
                           std::string metrics_json) = 0;
};

}  // namespace hetflow::actors
