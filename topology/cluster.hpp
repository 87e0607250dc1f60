// cluster: the parsed, validated topology file. Plain data, no CAF.
//
//   [cluster]  name, runtime settings, plugins
//   [[nodes]]  name, host, port, devices      (nodes[0] is the head)
//   [job]      kind + the kind's keys         (-> job_spec.params)
//   [[actors]] name, type, node, args         (optional; job kinds may add their own)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"
#include "topology/settings.hpp"

namespace hetflow::topology {

struct source_loc {
  uint32_t line = 0;    // 1-based; 0 = unknown
  uint32_t column = 0;  // 1-based; 0 = unknown
};

enum class device_kind { cpu, cuda };
const char* to_string(device_kind k) noexcept;

struct device_spec {
  device_kind kind = device_kind::cpu;
  int index = 0;              // cuda: device ordinal; cpu: 0
  int threads = 0;            // cpu: worker threads; 0 = all free cores
  uint64_t memory_bytes = 0;  // 0 = whatever the device has
  std::string profile;        // optional profile kind name (planner; later issues)
  source_loc where;
  // How many times as fast as its profile kind the device computes, for the
  // planner and the cost models (apply_device_speeds); a run computes at
  // the device's own speed. (Last: aggregate initialisers end at `where`.)
  double speed = 1.0;
};

struct node_spec {
  std::string name;
  std::string host;
  uint16_t port = 0;
  std::vector<device_spec> devices;
  std::vector<int> cpus;     // cpus: the node process runs on these CPUs (empty: unpinned)
  source_loc where;
};

struct actor_spec {
  std::string name;  // unique across the cluster
  std::string type;  // a catalog actor type
  std::string node;  // a node name
  settings args;     // checked against the type's keys
  source_loc where;
};

struct job_spec {
  std::string kind;  // a catalog job kind
  settings params;   // checked against the kind's keys
  source_loc where;
};

// [cluster] keys other than name. Defaults are what a demanding user expects.
struct runtime_settings {
  double join_timeout_s = 60.0;          // join_timeout
  double heartbeat_interval_s = 0.2;     // heartbeat_interval
  double connection_timeout_s = 1.0;     // connection_timeout (hung peer detection)
  std::string data_plane = "auto";       // data_plane: "auto" | "ucx" | "caf"
  std::string ucx_tls;                   // ucx_tls: e.g. "sm,self" or "tcp,self"; empty = UCX default
  std::string ucx_error_mode = "auto";   // ucx_error_mode: "auto" | "peer" | "none" (dataplane::ucx_error_mode)
  std::string ucx_net_devices = "auto";  // ucx_net_devices: "auto" | "all" | a UCX device list (net_devices.hpp)
  int scheduler_threads = 0;             // scheduler_threads: CAF workers; 0 = cores
  int thread_slice_us = 100;             // thread_slice_us: EEVDF slice of a node's threads; 0 = the kernel's
  uint64_t max_message_bytes = 1ull << 30;  // max_message: receiver's bound per message
  std::string pin_local_nodes = "auto";  // pin_local_nodes: "auto" | "off" (hetflow run)
  int metrics_port = 0;                  // metrics_port: node i serves /metrics at port + i; 0 = off
  double watchdog_s = 60.0;              // watchdog: log who waits on whom after this long without progress; 0 = off
  // The cluster secret nodes prove to each other on connect (HMAC-SHA256
  // challenge): read from secret_file (absolute after loading) or from the
  // environment variable secret_env. Both empty: no authentication.
  std::filesystem::path secret_file;     // secret_file
  std::string secret_env;                // secret_env
};

// A Linux CPU list ("0-3,8,10-11"): the CPU numbers, sorted, each once.
// errc::invalid_argument saying what is wrong (empty, not a number, a
// reversed range, above 4095).
expected<std::vector<int>> parse_cpu_list(std::string_view text);
// The list in the same syntax, ranges folded: {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);
// How many of `cpus` CPUs each local node gets (`hetflow run`'s
// pin_local_nodes = "auto"): want[i] > 0, a node whose cpu device asks for
// that many threads, gets them plus one for its service threads (the data
// plane's progress thread, its actors, a HetPipe stage's push and upload
// threads: on exactly T CPUs one of them preempts a compute thread and the
// team's barrier waits a time slice) when the CPUs allow that for every
// asking node; want[i] == 0 shares what is left (at least one each).
// Empty when they ask for more than there are.
std::vector<std::size_t> local_cpu_shares(const std::vector<std::size_t>& want, std::size_t cpus);
// A cpu device's thread count: its `threads`, else its node's `cpus`, else
// `machine_cpus` (every CPU the node may use).
int cpu_device_threads(const node_spec& n, const device_spec& d, int machine_cpus);

struct cluster {
  std::string name;
  std::filesystem::path file;      // absolute path of the topology file
  uint64_t content_hash = 0;       // FNV-1a 64 over the file's bytes (hello check)
  runtime_settings runtime;
  std::vector<std::filesystem::path> plugins;  // absolute
  std::vector<node_spec> nodes;
  job_spec job;
  std::vector<actor_spec> actors;

  const node_spec* find_node(std::string_view name) const;
  int node_index(std::string_view name) const;  // -1 if absent
  const node_spec& head() const { return nodes.front(); }
};

// The CPUs `hetflow run` pins the nodes `local` (indices into cl.nodes, the
// ones on this machine) to under pin_local_nodes = "auto": one list per
// node of `local`, in order, contiguous runs of `usable` as
// local_cpu_shares gives them (each node wants its largest cpu device's
// `threads`). Empty when it pins none: pin_local_nodes off, fewer than two
// local nodes, a node with its own `cpus` (each such node then pins itself),
// or more CPUs asked for than `usable` has.
std::vector<std::vector<int>> auto_pinned_cpus(const cluster& cl, const std::vector<int>& local,
                                               const std::vector<int>& usable);


}  // namespace hetflow::topology
