// hetpipe_plan: the HetPipe planner. Pure functions from (cluster devices,
// profiles, options) to a plan: which devices form each virtual worker (VW),
// the order of its stages, each stage's contiguous unit range, how many
// minibatches are in flight (Nm), where the parameter-server shards live,
// and the predicted throughput. `hetflow plan` prints it, `hetflow simulate`
// replays it event by event (simulator.hpp).
//
// Cost model of one VW with stages 0..S-1 (stage j on device d_j):
//
//   compute_j  = (sum over its units of fwd_ms + bwd_ms on d_j's kind, + its
//                share of the kind's update_ms (the local optimizer step))
//                x d_j's compute_factor (cpu stages of one host computing
//                at once: links.host_stage_factor)
//                + on a cpu device its passes over its weights once per
//                wave / Nm (profile_db::wave_sync_ms: rebase and push, and
//                with PS local its shard's add and pull answer, all on the
//                stage's cores)
//                + with overlapped waves its share of the bookkeeping per
//                minibatch (profile_db::wave_ms: its weights copied into the
//                minibatch's slot - not on a cpu device with one slot, which
//                holds the local weights -, on a cuda device with several
//                slots also the weights before the step, and the step
//                summed into the wave's update)
//   t(b)       = transfer of the boundary unit's output_bytes over the link
//                between d_j and d_j+1 (intra_node_gbps on one node,
//                inter_node_gbps between nodes, + latency_us)
//   stage_ms_j = compute_j + t(j -> j+1) [activations out] + t(j-1 -> j)
//                [gradients back]: the stage pays for what it sends;
//                a cpu stage also for what it receives, t(j-1 -> j) +
//                t(j -> j+1) (its node's data plane receives on the cores
//                it computes on)
//   latency L  = sum_j compute_j + 2 * sum_b t(b)   (one minibatch, fwd+bwd)
//   period T   = max(max_j stage_ms_j, L / Nm)     (Nm in flight)
//   memory_j   = params_j * w_j + activation_j * k_j,
//                k_j = min(Nm, S - j) minibatches in flight at stage j (each
//                slot keeps its activations, the weight version it started
//                with and its gradients); w_j the weight-sized buffers the
//                stage keeps (hetpipe_plan.cpp, weight_copies: the slots'
//                2 k_j, the local weights, W(c), the optimizer's state, the
//                wave updates, on a cuda device the pulls' upload buffer)
//
// WSP across VWs (every VW runs Nm-minibatch waves; D = staleness): per wave
// every stage pushes its aggregated update to the PS shards of its units and
// pulls fresh weights. sync_ms = the busiest node NIC's bytes per wave /
// inter_node_gbps (+ device<->host copies at intra_node_gbps for local
// shards). Wave w may start once every VW has pushed waves 0 .. w - 2 - D
// (simulator.hpp), so a wave's push and pull overlap D + 1 waves of work:
//   wave_ms = Nm * T + max(0, sync_ms - (D + 1) * Nm * T)
// Drained waves (hetpipe_waves = "drain"): a VW pulls wave w only after its
// own wave w - 1 is pushed, so each wave fills and empties the pipeline and
// its push and pull overlap nothing:
//   wave_ms = L + (Nm - 1) * max_j stage_ms_j + sync_ms
// Bounded staleness makes every VW progress at the slowest VW's wave rate
// in the long run: samples/s = VWs * Nm * batch / max_v wave_ms_v.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/cluster.hpp"
#include "topology/profile_db.hpp"

namespace hetflow::topology {

// One device the planner may use.
struct plan_device {
  std::string node;
  std::string host;          // the node's host (devices of one host share memory)
  int node_index = 0;
  std::size_t device = 0;    // index into the node's devices
  std::string kind;          // profile kind (the device's `profile`)
  uint64_t memory_bytes = 0; // 0 = no limit known
  bool cuda = false;         // a cuda device (its stage's buffers differ: weight_copies)
  // Multiplies its units' compute and its step: a cpu device whose host has
  // other cpu devices computing at once (links.host_stage_factor), else 1.
  double compute_factor = 1.0;
};

// Every device of the cluster, each with its profile kind (device key
// `profile`), memory (the device's `memory`, else the profile's
// devices.KIND.memory_bytes) and compute factor (links.host_stage_factor
// for cpu devices of a host with two or more of them). errc::invalid_argument naming node and device
// when a device has no profile kind or one the profile file lacks.
expected<std::vector<plan_device>> plan_devices(const cluster& c, const profile_db& db);

// The kind profiles measured on a machine give a device (job_profiles.cpp's
// measured_profiles, so also `hetflow profile --out` without --as): cudaI,
// or cpu-tN for a cpu device running `threads` threads (<= 0: "", the count
// is not known).
std::string measured_kind_name(const device_spec& d, int threads);

// A device's kind in `db`: its `profile`, else its measured_kind_name (for
// the threads it sets) when `db` has that kind; "" otherwise.
std::string device_profile_kind(const device_spec& d, const profile_db& db);

// Each device whose `speed` is not 1 gets a kind of its own, KIND@xS (its
// profile kind's times divided by S: profile_db::add_scaled_kind), named in
// its `profile`, and its speed set to 1 (so a second call changes nothing):
// the planner, the simulator and the cost models then price it at that
// speed, e.g. a machine that is not at hand from the same kind measured on
// this one. A device whose kind db lacks is left as it is (plan_devices
// reports it). Returns what it scaled ("n1 cpu 0 x 2, ..."), empty if none.
std::string apply_device_speeds(cluster& c, profile_db& db);

enum class allocation_policy { np, ed, hd };
const char* to_string(allocation_policy p) noexcept;
expected<allocation_policy> parse_allocation_policy(std::string_view s);

struct hetpipe_options {
  allocation_policy policy = allocation_policy::ed;
  int virtual_workers = 0;  // 0: from the policy (np: nodes; ed: fewest devices of a kind; hd: nodes)
  int nm = 0;               // minibatches in flight per VW; 0: the best that fits, 1..max_nm
  int max_nm = 16;
  int staleness = 0;        // D
  bool ps_local = false;    // "local" vs "spread"
  // "auto" (the default): local with one VW (no weights cross nodes), else
  // spread. Measured with one VW over a cpu node and an H200 (VGG-11, Nm =
  // 4 and 16): local 1.35-1.41x spread, whose shard on the cpu node took
  // that node's cores from its stage at every wave.
  bool ps_auto = false;
  int64_t batch = 0;        // minibatch size; 0: the profile's
  // nm = 0: rank the Nm that fit by a short simulation (simulator.hpp) rather
  // than by the formula above, which ignores pipeline bubbles of unbalanced
  // stages (it is optimistic at small Nm).
  bool nm_by_simulation = true;
  // The runtime overlaps waves (hetpipe_waves = "overlap", the default): each
  // stage then pays profile_db::wave_ms per minibatch.
  bool overlap_waves = true;
  // Weight-sized buffers the stages' optimizer keeps per weight (the job's
  // optimizer: sgd with momentum 1, plain sgd 0, adam 2): the memory model.
  int optimizer_states = 1;
};

// Groups devices into VWs. NP: the devices of one node form a VW (VW count =
// nodes with devices). ED: devices of each kind dealt round robin, so each VW
// gets an equal share of every kind. HD: devices sorted fastest first (by
// batch / total fwd+bwd ms), each VW takes its share half from the fast end
// and half from the slow end (fast kinds paired with slow kinds). With an
// explicit count ED/HD deal into that many; NP refuses a count other than
// the node count. Errors name the problem (more VWs than devices).
expected<std::vector<std::vector<plan_device>>> allocate_virtual_workers(const std::vector<plan_device>& devices,
                                                                        const profile_db& db,
                                                                        const hetpipe_options& options);

struct stage_plan {
  plan_device device;
  std::size_t first_unit = 0, last_unit = 0;  // inclusive
  int kept_minibatches = 0;                    // k_j
  uint64_t memory_bytes = 0;
  double compute_ms = 0.0;
  double send_ms = 0.0;       // activations to the next stage + gradients to the previous
  double receive_ms = 0.0;    // a cpu stage: receiving them (each as long as its send)
  double stage_ms = 0.0;      // compute + send + receive
  double fwd_ms = 0.0, bwd_ms = 0.0;
};

struct virtual_worker_plan {
  std::vector<stage_plan> stages;
  double latency_ms = 0.0;  // L
  double period_ms = 0.0;   // T
  double sync_ms = 0.0;     // PS push + pull per wave (the whole cluster's busiest port)
  double wave_ms = 0.0;
  double samples_per_s = 0.0;  // this VW alone, with its waves
  std::string bottleneck;      // "stage 2 (n1 cuda:0, 4.1 ms)" or "pipeline latency / Nm"
};

// The best stage order and boundaries for one VW at a given Nm: tries every
// distinct order of the devices (devices of one kind on one node are
// interchangeable) and, per order, the boundaries minimising the slowest
// stage (dynamic programming) under each device's memory. errc::out_of_memory
// saying what fits nowhere when no order fits; invalid_argument when there
// are more devices than units. `overlap_waves`: the stages pay the
// bookkeeping of overlapped waves (profile_db::wave_ms). Every cpu stage
// pays its passes over its weights once per wave (profile_db::wave_sync_ms,
// per minibatch), `shards_local`: with its PS shard's (ps_placement local).
// A stage's memory: its units' activations for each minibatch it keeps, and
// its weights times the buffers of their size it keeps (hetpipe_plan.cpp,
// weight_copies; `optimizer_states` as in hetpipe_options).
expected<virtual_worker_plan> partition_virtual_worker(const std::vector<plan_device>& devices,
                                                       const profile_db& db, int nm, bool overlap_waves = true,
                                                       bool shards_local = false, int optimizer_states = 1);

struct hetpipe_plan {
  allocation_policy policy = allocation_policy::ed;
  bool ps_local = false;
  int nm = 1;
  int staleness = 0;
  int64_t batch = 0;
  std::vector<virtual_worker_plan> virtual_workers;
  std::vector<std::string> nodes;        // node names by index
  std::vector<int> unit_ps_node;         // the node index holding each unit's PS shard
  std::vector<uint64_t> ps_bytes;        // per node index
  double sync_ms = 0.0;
  // The runtime drains each wave before the next (hetpipe_options'
  // overlap_waves false): the wave formula with the fill and drain.
  bool drained_waves = false;
  double predicted_samples_per_s = 0.0;
  std::string bottleneck;
  std::vector<std::string> notes;        // why Nm, what did not fit
};

// Places unit shards: spread (largest units first, each on the node with
// fewest bytes so far) or local (each unit on the node that runs it in most
// VWs; ties: the node with fewest bytes so far).
std::vector<int> place_ps_shards(const std::vector<virtual_worker_plan>& vws, const profile_db& db,
                                 std::size_t node_count, bool local);

// PS traffic per wave: the busiest node's NIC time (push and pull of every
// stage's params to/from remote shards) plus the busiest device's copies to
// a local shard.
double wave_sync_ms(const std::vector<virtual_worker_plan>& vws, const std::vector<int>& unit_ps_node,
                    const profile_db& db, std::size_t node_count);

// Fills period/latency-derived wave_ms and samples_per_s of every VW and the
// plan's predicted throughput and bottleneck (the formulas above).
void finish_prediction(hetpipe_plan& plan);

// The whole planner. `node_names` by node index.
expected<hetpipe_plan> plan_hetpipe(const std::vector<plan_device>& devices, const std::vector<std::string>& node_names,
                                    const profile_db& db, const hetpipe_options& options);

// Options from a train job's [job] keys (allocation, virtual_workers, nm,
// staleness, ps_placement, batch_size).
expected<hetpipe_options> hetpipe_options_of(const cluster& c);

// Whether the runtime (`hetflow run`) drains the waves instead of
// overlapping them: the job's hetpipe_waves = "drain" (`why` then says so).
// cpu and cuda stages overlap alike.
bool runtime_drains_waves(const cluster& c, std::string* why = nullptr);

}  // namespace hetflow::topology
