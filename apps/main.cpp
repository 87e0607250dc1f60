// hetflow: one binary per node.
//
//   hetflow node FILE --name N [--report PATH] [--trace PATH] [--join-timeout S]
//   hetflow run FILE [--report PATH] [--plot PATH] [--trace PATH] [--join-timeout S]
//   hetflow plot REPORT --out PATH
//   hetflow validate FILE
//   hetflow shell HOST:PORT [--topology FILE] [-c COMMAND] [--json]
//   hetflow version | help
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/node_runtime.hpp"
#include "actors/plugin_loader.hpp"
#include "actors/registry.hpp"
#include "apps/launcher.hpp"
#include "apps/plan_command.hpp"
#include "apps/plot_command.hpp"
#include "apps/profile_command.hpp"
#include "apps/shell_command.hpp"
#include "apps/simulate_command.hpp"
#include "kernels/cpu/omp_policy.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/trace.hpp"
#include "topology/parser.hpp"

namespace hetflow::apps {
int gen_criteo_command(const std::vector<std::string>& args);  // gen_criteo_command.cpp
}

namespace {

constexpr const char* usage_text = R"(usage: hetflow COMMAND [ARGS]

commands:
  run FILE [--report PATH] [--plot PATH] [--trace PATH] [--join-timeout SECONDS] [--resume]
      start every node of FILE whose host is this machine, stream their output
      prefixed with the node name, and exit with the job's status; --resume:
      continue from the job's newest complete checkpoint (train: ps, dp, single);
      --plot: after a train job, its loss, accuracy and throughput over time
      as an SVG (other jobs: nothing written, one line says why); --trace:
      every local node's actors on one timeline, Chrome trace JSON (Perfetto)
  node FILE --name NODE [--report PATH] [--trace PATH] [--join-timeout SECONDS] [--resume] [--strategy S]
      run one node of the cluster described by FILE (what Slurm, Kubernetes or
      systemd start on each machine); --trace: this node's timeline;
      --strategy: what strategy "auto" is on this node (run passes its choice)
  validate FILE
      check a topology file; print every problem as FILE:LINE:COL: error: ...
  plan FILE [--json] [--no-measure]
      print which actors the job runs on which node; for strategy "dp" the
      replicas, the ring order and the batch split by (measured) replica speed;
      for strategy "hetpipe" the virtual workers, stages, unit ranges, memory
      and predicted throughput; "auto" compares the strategies and says why
  plot REPORT --out PATH
      the --plot SVG from a `run --report` file of a train job
  trace-merge TRACE... --out PATH
      one timeline from the --trace files of nodes on several hosts (each
      written by `hetflow node --trace`); their clocks must be synchronised
  simulate FILE [--json] [--waves N] [--as-run]
      predict a train job's throughput from profiles (hetpipe: discrete-event
      simulation of the plan, its waves as `hetflow run` does them: drained
      with hetpipe_waves = "drain", else overlapped; dp, single: cost model)
  profile FILE [--batch B] [--out PROFILE.json [--as NAME] [--repeat N]]
      time every unit of a train job's model on this machine's devices;
      --out: write them as a profile_file (kinds NAME-cpu-tN, NAME-cudaI;
      --repeat: the median of N measurements)
  profile --merge A.json B.json ... --out PROFILE.json
      join several machines' profile files into one profile_file
  gen-criteo --rows N --out FILE [--seed S] [--threads T]
      write deterministic synthetic Criteo-format data (tests, benchmarks)
  shell HOST:PORT [--topology FILE] [-c COMMAND] [--json] [--timeout SECONDS]
      the actor shell of a running job: nodes, actors, stat, waits, clocks,
      plan, top, kill (a fault drill); interactive with history and Tab
      completion, or one command with -c (exit 0 ok, 1 command failed,
      3 node unreachable or refused); --topology: prove the cluster secret
      of that file (else HETFLOW_SECRET_FILE)
  devices
      list this machine's CPU cores, memory and CUDA devices (or why there are none)
  version
      print the version
  help
      print this text

not implemented yet: NCCL (cuda replicas and stages exchange through the
  host); see README.md, "Not done yet"

exit codes: 0 ok, 1 job failed, 2 bad usage or topology, 3 a peer node failed,
            130 interrupted
)";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "hetflow: %s\n\n%s", msg.c_str(), usage_text);
  return 2;
}

struct common_args {
  std::string file;
  std::string name;
  std::string report;
  std::string plot;
  std::string trace;
  std::size_t trace_max_events = hetflow::kernels::trace::default_max_events;
  std::optional<double> join_timeout;
  bool resume = false;
  std::string strategy;  // node: --strategy (what "auto" resolves to)
  std::string error;
};

// want_name: `node` (--name NODE); else `run` (--plot PATH).
common_args parse_args(const std::vector<std::string>& args, bool want_name) {
  common_args a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      if (i + 1 >= args.size()) {
        a.error = std::string(flag) + " needs a value";
        return std::nullopt;
      }
      return args[++i];
    };
    if (s == "--name" && want_name) {
      if (auto v = value("--name")) a.name = *v;
    } else if (s == "--resume") {
      a.resume = true;
    } else if (s == "--strategy" && want_name) {
      if (auto v = value("--strategy")) a.strategy = *v;
    } else if (s == "--report") {
      if (auto v = value("--report")) a.report = *v;
    } else if (s == "--plot" && !want_name) {
      if (auto v = value("--plot")) {
        a.plot = *v;
        if (std::string why = hetflow::apps::check_plot_path(a.plot); !why.empty()) a.error = why;
      }
    } else if (s == "--trace") {
      // Checked before the job starts: a run must not end with nowhere to
      // write its timeline.
      if (auto v = value("--trace")) {
        a.trace = *v;
        if (std::string why = hetflow::kernels::trace::check_output_path(a.trace); !why.empty()) a.error = why;
        auto max = hetflow::kernels::trace::max_events_from_env();
        if (!max)
          a.error = max.error().message();
        else
          a.trace_max_events = *max;
      }
    } else if (s == "--join-timeout") {
      if (auto v = value("--join-timeout")) {
        char* end = nullptr;
        double d = std::strtod(v->c_str(), &end);
        if (end == v->c_str() || *end != '\0' || d <= 0)
          a.error = "--join-timeout wants a positive number of seconds, got '" + *v + "'";
        else
          a.join_timeout = d;
      }
    } else if (!s.empty() && s[0] == '-') {
      a.error = "unknown option '" + s + "'";
    } else if (a.file.empty()) {
      a.file = s;
    } else {
      a.error = "unexpected argument '" + s + "'";
    }
    if (!a.error.empty()) break;
  }
  if (a.error.empty() && a.file.empty()) a.error = "missing topology FILE";
  if (a.error.empty() && want_name && a.name.empty()) a.error = "missing --name NODE";
  return a;
}

// The topology FILE among a command's arguments: the first that is neither an
// option nor the value of an option that takes one; "" if none. Sets `node`
// to --name's value.
std::string topology_argument(const std::vector<std::string>& args, std::string& node) {
  static const char* const with_value[] = {"--name", "--report", "--join-timeout", "--batch", "--waves",
                                           "--trace", "--plot", "--out", "--as", "--repeat"};
  std::string file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    bool takes_value = false;
    for (const char* f : with_value) takes_value = takes_value || args[i] == f;
    if (takes_value) {
      if (i + 1 < args.size() && args[i] == "--name") node = args[i + 1];
      ++i;
    } else if (file.empty() && !args[i].empty() && args[i][0] != '-') {
      file = args[i];
    }
  }
  return file;
}

// Loads the plugins FILE names into `reg` (before FILE is checked against
// reg's catalog: it may use their names). Prints every problem; false = exit 2.
bool load_plugins_of(const std::string& cmd, const std::vector<std::string>& args,
                     hetflow::actors::registry& reg) {
  std::string node;
  // `profile --merge A.json B.json ...` reads profile files, no topology.
  if (cmd == "profile" && std::find(args.begin(), args.end(), "--merge") != args.end()) return true;
  const std::string file = topology_argument(args, node);
  if (file.empty()) return true;  // the command reports the missing FILE
  auto r = hetflow::actors::load_plugins(file, reg, cmd == "node" ? node : std::string());
  for (auto& d : r.errors) std::fprintf(stderr, "%s\n", hetflow::topology::format(d).c_str());
  if (!r.ok()) {
    std::fprintf(stderr, "%zu error%s\n", r.errors.size(), r.errors.size() == 1 ? "" : "s");
    return false;
  }
  if (cmd == "validate") {
    for (auto& p : r.loaded) {
      std::string what;
      for (auto& t : p.actor_types) what += (what.empty() ? "actor types " : ", ") + t;
      std::string kinds;
      for (auto& k : p.job_kinds) kinds += (kinds.empty() ? "job kinds " : ", ") + k;
      if (!kinds.empty()) what += (what.empty() ? "" : "; ") + kinds;
      std::string tf;
      for (auto& t : p.transforms) tf += (tf.empty() ? "transforms " : ", ") + t;
      if (!tf.empty()) what += (what.empty() ? "" : "; ") + tf;
      std::string ly;
      for (auto& t : p.layers) ly += (ly.empty() ? "layers " : ", ") + t;
      if (!ly.empty()) what += (what.empty() ? "" : "; ") + ly;
      std::printf("plugin '%s' (%s): %s\n", p.name.c_str(), p.path.c_str(),
                  what.empty() ? "registered nothing" : what.c_str());
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Tensor buffers of tens of MiB come and go at a high rate; keep them on
  // the heap instead of fresh mmaps (page faults on every message).
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Each preprocess input stays open for the job (its blocks are read with
  // pread): the soft limit on open files (often 1024) up to the hard one.
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (argc < 2) return usage_error("missing COMMAND");
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  // The commands that compute (or measure what the nodes will compute) run
  // libgomp with a passive wait policy unless the environment picks one; `run`
  // passes it on to its nodes (kernels/cpu/omp_policy.hpp).
  auto passive_omp = [&] {
    const std::string why = hetflow::kernels::cpu::reexec_with_passive_omp_wait(argv);
    if (!why.empty())
      std::fprintf(stderr, "hetflow %s: OpenMP wait policy left at libgomp's default: %s\n", cmd.c_str(),
                   why.c_str());
  };
  if (cmd == "node" || cmd == "profile" || cmd == "plan" || cmd == "simulate") passive_omp();

  hetflow::actors::registry reg;
  hetflow::actors::add_builtin_types(reg);
  // Plugins first, in every process that reads a topology (`run`'s children
  // are `hetflow node`s): README "Write your own actor type".
  if (cmd == "validate" || cmd == "node" || cmd == "run" || cmd == "plan" || cmd == "profile" ||
      cmd == "simulate") {
    if (!load_plugins_of(cmd, args, reg)) return 2;
  }

  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(usage_text, stdout);
    return 0;
  }
  if (cmd == "version" || cmd == "--version") {
    std::printf("hetflow 0.1.0\n");
    return 0;
  }
  if (cmd == "devices") {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    std::printf("cpu: %u cores, %.1f GiB memory\n", std::thread::hardware_concurrency(),
                static_cast<double>(pages) * page / (1024.0 * 1024 * 1024));
    auto cuda = hetflow::kernels::probe_cuda();
    if (cuda.devices.empty())
      std::printf("cuda: none (%s)\n", cuda.why_none.c_str());
    for (auto& d : cuda.devices)
      std::printf("cuda %d: %s, %.1f GiB, compute capability %d.%d\n", d.index, d.name.c_str(),
                  static_cast<double>(d.memory_bytes) / (1024.0 * 1024 * 1024), d.cc_major, d.cc_minor);
    return 0;
  }
  if (cmd == "validate") {
    if (args.size() != 1) return usage_error("validate takes exactly one FILE");
    auto r = hetflow::topology::load_topology(args[0], reg.catalog());
    for (auto& d : r.errors) std::fprintf(stderr, "%s\n", hetflow::topology::format(d).c_str());
    if (!r.ok()) {
      std::fprintf(stderr, "%zu error%s\n", r.errors.size(), r.errors.size() == 1 ? "" : "s");
      return 2;
    }
    // The job's actors as the nodes will place them (job kinds check their
    // keys against the topology there: unknown nodes, unsupported devices).
    auto placed = hetflow::actors::job_actors(*r.model, reg);
    if (!placed) {
      const auto& w = r.model->job.where;
      std::fprintf(stderr, "%s:%u:%u: error: %s\n1 error\n", args[0].c_str(), unsigned(w.line), unsigned(w.column),
                   placed.error().message().c_str());
      return 2;
    }
    std::printf("%s: ok (cluster '%s', %zu node%s, job '%s')\n", args[0].c_str(),
                r.model->name.c_str(), r.model->nodes.size(), r.model->nodes.size() == 1 ? "" : "s",
                r.model->job.kind.c_str());
    return 0;
  }
  if (cmd == "node") {
    auto a = parse_args(args, true);
    if (!a.error.empty()) return usage_error(a.error);
    hetflow::actors::node_options o;
    o.topology = a.file;
    o.name = a.name;
    o.report = a.report;
    o.trace = a.trace;
    o.trace_max_events = a.trace_max_events;
    o.join_timeout_s = a.join_timeout;
    o.resume = a.resume;
    o.strategy = a.strategy;
    if (int rc = hetflow::apps::resolve_strategy(a.file, reg, "node", o.strategy); rc != 0) return rc;
    return hetflow::actors::run_node(o, reg);
  }
  if (cmd == "run") {
    auto a = parse_args(args, false);
    if (!a.error.empty()) return usage_error(a.error);
    hetflow::apps::launch_options o;
    o.topology = a.file;
    o.report = a.report;
    o.plot = a.plot;
    o.trace = a.trace;
    o.join_timeout_s = a.join_timeout;
    o.resume = a.resume;
    if (int rc = hetflow::apps::resolve_strategy(a.file, reg, "run", o.strategy, passive_omp); rc != 0) return rc;
    hetflow::kernels::cpu::set_passive_omp_wait_for_children();
    return hetflow::apps::run_local_cluster(o, reg);
  }
  if (cmd == "profile") return hetflow::apps::profile_command(args, reg);
  if (cmd == "gen-criteo") return hetflow::apps::gen_criteo_command(args);
  if (cmd == "plan") return hetflow::apps::plan_command(args, reg);
  if (cmd == "simulate") return hetflow::apps::simulate_command(args, reg);
  if (cmd == "plot") return hetflow::apps::plot_command(args);
  if (cmd == "trace-merge") {
    // The --trace files of nodes on several hosts: one document, in the
    // order given (as `hetflow run` merges its local nodes').
    std::vector<std::filesystem::path> inputs;
    std::filesystem::path out;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--out") {
        if (i + 1 >= args.size()) return usage_error("--out needs a PATH");
        out = args[++i];
      } else if (args[i].starts_with("--")) {
        return usage_error("trace-merge: unknown option '" + args[i] + "'");
      } else {
        inputs.emplace_back(args[i]);
      }
    }
    if (inputs.empty() || out.empty()) return usage_error("trace-merge takes TRACE... --out PATH");
    auto m = hetflow::kernels::trace::merge_files(inputs, out, "merged by hetflow trace-merge");
    if (!m) {
      std::fprintf(stderr, "hetflow trace-merge: %s\n", m.error().message().c_str());
      return 1;
    }
    for (auto& why : m->skipped) std::fprintf(stderr, "hetflow trace-merge: skipped %s\n", why.c_str());
    if (m->files == 0) {
      std::fprintf(stderr, "hetflow trace-merge: none of the %zu files is a trace; %s not written\n", inputs.size(),
                   out.c_str());
      std::filesystem::remove(out);
      return 1;
    }
    std::printf("hetflow trace-merge: %zu events from %zu file%s written to %s%s\n", m->events, m->files,
                m->files == 1 ? "" : "s", out.c_str(),
                m->dropped > 0 ? (" (" + std::to_string(m->dropped) + " events were dropped by the nodes)").c_str()
                               : "");
    return m->skipped.empty() ? 0 : 1;
  }
  if (cmd == "shell") return hetflow::apps::shell_command(args, reg);
  return usage_error("unknown command '" + cmd + "'");
}
