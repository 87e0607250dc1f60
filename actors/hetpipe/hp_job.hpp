// The HetPipe strategy of the train job (strategy = "hetpipe"): the actor
// types hp_head, hp_stage and hp_ps, the job's expansion into them, the
// messages between them and the job report's "hetpipe" member.
//
// Placement (deterministic on every node, without profiles):
//   hphead       on the first node: plans (profile_file, else profiles
//                measured on its own machine, as `hetflow plan` does), sends
//                every actor its role, gathers the VWs' statistics and the
//                final weights, evaluates, reports;
//   hpstage<k>   one per device of the topology (k in node order): the head
//                tells it its VW, stage, unit range and neighbours, or that
//                the plan does not use it (it then ends at once);
//   hpps<n>      one per node: the PS shard of the units the plan places on
//                node n (topology::place_ps_shards: spread or local).
//
// Data: VW v of V trains on steps j of every epoch with j % V == v (the
// single-device plan and shuffled order; `batch_size` is each VW's
// minibatch), as ps/ralp workers do.
//
// Messages: the RALP envelope (ralp_protocol.hpp: a 64-byte ralp_info,
// tensors, text) with the kinds below. In ralp_info:
//   forward   stage j -> j+1   clock = minibatch p, global = epoch, aux = step,
//                              lr; tensors: activations, labels (i32)
//   backward  stage j+1 -> j   clock = p; tensor: dL/d(activations)
//   push      stage -> hpps    worker = its table index, clock = wave,
//                              aux = first unit, reserved = last unit; the
//                              update of the units held there
//   pull      stage -> hpps    the same fields, clock = the wave to start;
//                              flags = flag_final: every unit, once every
//                              stage finished (the head)
//   weights   hpps -> stage    clock = the pull's; tensors as the push's
//   role      head -> actors   text: "key=value" lines
//   stats     last stage -> head   text: one "epoch loss_sum correct samples
//                              seconds" line per epoch
//   bye       head -> hpps     the job is over
//   error     anyone           text: why
//   labels    stage/shard -> head   (--resume) text: its readable checkpoint
//                              labels (waves), comma separated
//   restore   head -> stage/shard   clock = the newest label every one of
//                              them has (-1: none: train from the start)
//
// Checkpoints (checkpoint_dir; checkpoint_every waves, 0: one epoch's
// waves): a shard writes `hpps<n>.ckpt-<K>` once every VW pushed the waves
// < K (its units then hold exactly those: later pushes wait), a stage writes
// `hpstage<k>.ckpt-<K>` (its local optimizer state) before it pulls wave K,
// and the head keeps the plan in `hphead.plan` on the first node, so a
// resumed run cuts the stages the same way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schemas/error.hpp"
#include "topology/catalog.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {
class registry;
struct actor_result;
}  // namespace hetflow::actors

namespace hetflow::actors::hp_job {

enum : uint32_t {
  kind_role = 0x48500001,
  kind_forward = 0x48500002,
  kind_backward = 0x48500003,
  kind_push = 0x48500004,
  kind_pull = 0x48500005,
  kind_weights = 0x48500006,
  kind_stats = 0x48500007,
  kind_bye = 0x48500008,
  kind_error = 0x48500009,
  kind_labels = 0x4850000a,   // stage/shard -> head (--resume): text = its checkpoint labels, comma separated
  kind_restore = 0x4850000b,  // head -> stage/shard: clock = the label to restore (-1: none, from the start)
  kind_state = 0x4850000c,    // stage -> head at the end: its running statistics (text: their names, one a line)
  kind_eval = 0x4850000d,     // shard -> head at an epoch's last wave L: its units' weights (clock = L) holding
                              // exactly the waves < L of every VW (eval_each_epoch)
  kind_profile = 0x4850000e,  // head -> hp_ps of another host (aux = batch): measure this host's devices;
                              // back: text = the answer (hp_profiles.hpp)
  kind_link = 0x4850000f,     // head -> hp_ps of another node (aux = a sequence number, one tensor of
                              // the probe's size): back at once, the same info and no tensor
};

inline const std::string head_name = "hphead";
inline std::string stage_name(int k) { return "hpstage" + std::to_string(k); }
inline std::string ps_name(int node_index) { return "hpps" + std::to_string(node_index); }

// "key=value" lines (values without newlines).
std::string encode_role(const std::map<std::string, std::string>& kv);
std::map<std::string, std::string> decode_role(const std::string& text);
std::string join_ints(const std::vector<int64_t>& v);
std::vector<int64_t> split_ints(const std::string& s);

// Minibatches of VW v of V over the job: steps j < steps of each epoch with
// j % V == v.
int64_t vw_minibatches(int64_t steps_per_epoch, int epochs, int v, int V);

// The answer to the head's kind_profile request: this host's devices
// measured here (hp_profiles.hpp; defined in hp_profiles.cpp).
expected<std::string> measure_host_profiles(const topology::cluster& c, int node_index, int64_t batch);

// The actors of a strategy "hetpipe" train job.
expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c);
void add_types(registry& reg);
// Report member for the train job (",\"hetpipe\":{...}").
std::string summarize(const std::vector<actor_result>& results);

void add_hp_head(registry& reg);
void add_hp_stage(registry& reg);
void add_hp_ps(registry& reg);

}  // namespace hetflow::actors::hp_job
