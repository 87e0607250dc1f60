// Planner pieces of data-parallel training (strategy "dp"): which replicas a
// job has, the order of their all-reduce ring, and how a global batch is
// split among replicas of different speeds. Pure functions: the train job
// and `hetflow plan` call the same ones, so what plan prints is what runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::topology {

struct dp_replica {
  std::string node;          // node name
  std::string host;          // the node's host (ring grouping)
  std::size_t device = 0;    // index into the node's devices
  device_spec spec;          // a copy of that device
};

// One replica per device of each node in `nodes` (every node when empty), in
// topology order (nodes, then their devices; a node without devices has one
// cpu replica). errc::invalid_argument naming an unknown node or a repeated
// one.
expected<std::vector<dp_replica>> dp_replicas(const cluster& c, std::span<const std::string> nodes);

// A ring order over members on `hosts` (hosts[i] is member i's host):
// members grouped by host, hosts in order of first appearance and members of
// one host in index order, so the ring crosses each host boundary once in
// each direction. Returns member indices.
std::vector<std::size_t> ring_order(std::span<const std::string> hosts);

// Splits `rows` among replicas in proportion to `speeds` (rows per second):
// each gets the floor of its share, then the rows left over go one each to
// the largest fractional remainders (ties: lower index). Speeds that are not
// finite and positive count as the slowest positive speed (all equal when
// none is). The result sums to `rows`; it depends only on the arguments, so
// every replica computes the same split from the same speeds.
std::vector<int64_t> split_rows(int64_t rows, std::span<const double> speeds);

// Splits `rows` so that the slowest replica's step ends as early as possible
// when replica i takes fixed_s[i] + r * per_row_s[i] seconds for r > 0 rows
// and nothing for none: a device with a per-step cost (kernel launches, host
// copies, its optimizer step) gets fewer rows than its per-row speed says,
// and none at all when even one row would end its step after the others'
// (it is left out of the compute; it still takes part in the sums).
// Rows go one at a time to the replica whose step would then end first (ties:
// lower index), which minimises the slowest step. Costs that are not finite
// count as the slowest good one (fixed) or 0 (negative fixed); a per-row cost
// that is not finite and positive counts as the largest good one (all equal when
// none is). O(rows log n); the same arguments give the same split.
std::vector<int64_t> split_rows_timed(int64_t rows, std::span<const double> fixed_s,
                                      std::span<const double> per_row_s);

// Row offset of replica r inside a split batch: the sum of the rows before it.
int64_t split_offset(std::span<const int64_t> split, std::size_t r);

}  // namespace hetflow::topology
