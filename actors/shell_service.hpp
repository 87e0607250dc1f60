// shell_service: the server side of `hetflow shell` (issue 8). Each node
// answers a shell about itself; the shell fans out to every node for
// cluster-wide views (apps/shell_command.cpp).
//
//   shell (actors/shell_client)               node's gate -> node actor
//   ------------------------------------      ----------------------------------
//   challenge                          --->   nonce_N (the nodes' challenge:
//                                      <---    one per CAF node, used once)
//   shell(client, nonce_S, mac_S)      --->   mac_S = H("hetflow-shell",
//                                               client, nonce_N, nonce_S)?
//                                      <---   shell(true, node name,
//                                               mac_N = H("hetflow-shell-welcome",
//                                               node, nonce_S, nonce_N),
//                                               this node's shell service)
//                                             or shell(false, why, {}, {}),
//                                             logged on the node
//   shreq("state", "")                 --->   shell service: shreq(true, JSON)
//   shkill(ACTOR)                      --->   shell service -> node actor:
//                                             exit(kill) to a local actor;
//                                             shreq(ok, what was done)
//   shpause(ACTOR, pause?)             --->   shell service -> node actor:
//                                             pause / resume a local actor
//                                             that honours it (control_board)
//   shstale(D)                         --->   shell service -> node actor:
//                                             HetPipe shards here take D
//   shckpt(LABEL)                      --->   shell service -> node actor:
//                                             the PS shards here take one
//                                             more checkpoint at clock LABEL
//                                             (control_board); the answer
//                                             waits for theirs (<= 2 s)
//
// A shell never holds the node actor: the service answers these requests
// and nothing else, so a shell cannot join or stop the job except through
// `kill` (a fault drill, logged) or by pausing a stage past ps_timeout. With no cluster secret, every
// shell is accepted (as every node is).
//
// Wire: only CAF built-in types (strings, byte vectors, bools, actors).
// The state is one JSON object (see state_json below) so that new fields
// need no new message types.
#pragma once

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hetflow::actors {

using shell_atom = caf::atom_constant<caf::atom("shell")>;    // shell hello / its answer
using shreq_atom = caf::atom_constant<caf::atom("shreq")>;    // (shreq, cmd, arg) -> (shreq, ok, body)
using shkill_atom = caf::atom_constant<caf::atom("shkill")>;  // (shkill, actor) -> (shreq, ok, text)
using shkillchk_atom = caf::atom_constant<caf::atom("shkillchk")>;  // node actor: did the killed actor go?
using shpause_atom = caf::atom_constant<caf::atom("shpause")>;  // (shpause, actor, pause?) -> (shreq, ok, text)
using shstale_atom = caf::atom_constant<caf::atom("shstale")>;  // (shstale, D) -> (shreq, ok, text)
using shckpt_atom = caf::atom_constant<caf::atom("shckpt")>;    // (shckpt, label) -> (shreq, ok, text)

// What a node knows about itself and its job when a shell asks; filled by
// node_runtime (thread-safe to call from any thread).
struct shell_node_snapshot {
  std::string cluster, job, strategy;  // strategy: [job] strategy, "" if none
  std::string node, host, data_plane;
  int index = 0;
  int port = 0;
  double uptime_s = 0;
  uint64_t rss_bytes = 0;
  bool job_running = false;  // false once the job ends or stops
  uint64_t messages_sent = 0, bytes_sent = 0, messages_received = 0, bytes_received = 0;
  struct node_entry {
    std::string name, host;
    int port = 0;
  };
  std::vector<node_entry> nodes;  // every node of the topology, in file order
  struct actor_entry {
    std::string name, type, node;
  };
  std::vector<actor_entry> actors;  // every actor of the job (the placement), every node
};

// One sample of the Prometheus text that actors/metrics renders.
struct metric_sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};
// Parses exposition text (comments skipped; label values unescaped); lines
// that do not parse are skipped.
std::vector<metric_sample> parse_metric_samples(const std::string& text);

// The node's state as one JSON object:
//   {cluster, job, strategy, node, index, host, port, data_plane, uptime_s,
//    rss_bytes, job_running, progress_total,
//    data_plane_stats: {messages_sent, bytes_sent, messages_received, bytes_received},
//    nodes: [{name, host, port}], placement: [{name, type, node}],
//    actors: [{name, type, state: "running"|"finished"|"failed"|"not started",
//              mailbox: null, gauges: {"train_epoch": 2, "preprocess_rows{pass=1}": ...}}],
//    waits: [{actor, on, what, seconds}]}
// `metrics_text` is actors/metrics' render() of this process; the open waits
// come from kernels/waits.
std::string state_json(const shell_node_snapshot& s, const std::string& metrics_text);

// The service actor (one per node, spawned by the node actor at the first
// accepted shell). Ends with `node`.
caf::behavior shell_service(caf::event_based_actor* self, std::function<shell_node_snapshot()> snapshot,
                            caf::actor node);

}  // namespace hetflow::actors
