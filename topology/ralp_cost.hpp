// ralp_cost: where to cut a model for RALP (strategy "ralp": the layers
// after the cut run on the parameter-server node next to their weights, the
// layers before it are data parallel through that server). Pure functions
// from a profile (profile_db.hpp) and the link to a table of candidates.
//
// Candidate cut k (1 <= k < units): workers run units [0, k), the server
// runs [k, end) for every worker's batch. "No cut" (k = units) is plain
// parameter serving: workers run everything and move every weight.
//
// Per BSP step (every worker one batch of `batch` rows):
//
//   bytes_per_step = W x (2 x params(0..k-1)             pull + push of the lower weights
//                         + 2 x output_bytes(k-1)          activations up, their gradient down
//                         + batch x label_bytes)           the labels go with the activations
//   (no cut: W x 2 x params(all))
//
//   step_ms = max over workers of compute(0..k-1) on the worker's kind
//           + transfer(bytes_per_step)                     every byte crosses the server's link
//           + W x compute(k..end) on the server's kind     it serves every worker, one after another
//           + W x update_ms (server's kind)                all the optimizer steps run there
//
//   transfer(b) = b / bandwidth + messages x latency (4 messages a step with a
//   cut, 2 without). No overlap is assumed (an upper bound, as cost_model.hpp).
//   The runtime's server measures both (actors/link_probe.hpp): latency is
//   half a round trip of 4 bytes between two sides that were idle 1 ms, as a
//   step's receiver is (the back-to-back round trip is ~3x shorter on a VM).
//
// The chosen cut has the least step_ms; ties (within 1e-9 relative): fewer
// bytes, then the later cut (less work on the server).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::topology {

struct ralp_cost_inputs {
  int workers = 1;
  int64_t batch = 0;                      // rows per worker step; 0: the profile's batch
  std::vector<std::string> worker_kinds;  // profile kind of each worker's device
  std::string server_kind;                // profile kind of the server's device
  double gbps = 10.0;                     // the server's link
  double latency_us = 5.0;                // per message
  uint64_t label_bytes = 4;               // per row (int32 labels)
};

struct ralp_candidate {
  std::size_t cut = 0;            // first unit on the server; == units: no cut
  std::string unit;               // that unit's name; "(no cut)" for plain PS
  uint64_t lower_params_bytes = 0;
  uint64_t activation_bytes = 0;  // one worker's activations at the cut (one direction)
  uint64_t bytes_per_step = 0;
  double worker_ms = 0, transfer_ms = 0, server_ms = 0, step_ms = 0;
};

struct ralp_estimate {
  int64_t batch = 0;
  std::vector<ralp_candidate> candidates;  // cuts 1 .. units-1, then no cut
  std::size_t chosen = 0;                  // index into candidates
  std::string why;                         // one sentence: the winner against the runner-up and no cut
  const ralp_candidate& best() const { return candidates[chosen]; }
  const ralp_candidate* find(std::size_t cut) const;
};

// errc::invalid_argument for an empty profile, no workers, a kind the
// profile lacks, or a bandwidth <= 0.
expected<ralp_estimate> estimate_ralp(const profile_db& db, const ralp_cost_inputs& in);

}  // namespace hetflow::topology
