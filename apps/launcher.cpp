#include "apps/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>

#include "actors/json.hpp"
#include "actors/node_runtime.hpp"
#include "actors/registry.hpp"
#include "apps/plot_command.hpp"
#include "kernels/trace.hpp"
#include "topology/parser.hpp"

namespace hetflow::apps {
namespace {

using clock_type = std::chrono::steady_clock;

// Addresses that name this machine: loopback, our hostname, our interfaces.
bool host_is_local(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  std::set<std::string> mine;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      else if (i->ifa_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
      if (buf[0] != 0) mine.insert(buf);
    }
    freeifaddrs(ifs);
  }
  return mine.count(host) > 0;
}

// Whether this process runs one thread only (a fork copies just the caller).
bool single_threaded() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::strtol(line.c_str() + 8, nullptr, 10) == 1;
  return false;
}

// Whether the local nodes start as forks of the launcher, without exec: the
// pre-processing job (it counts on oneTBB, and no OpenMP kernel runs: libgomp
// keeps the wait policy it read when the launcher was loaded, and only an
// exec'd node reads the passive one `run` sets for its children) when the
// topology loads no plugin (a node's plugins are told its name when they
// load) and the launcher runs one thread. A fork shares the launcher's
// loaded and relocated libraries: on the 2-core VM a process's start after a
// few seconds idle took 40-100 ms, nearly all of it the first touch of the
// dynamic libraries' pages; 2-node jobs ended 4% sooner forked (median of 8,
// bench/RESULTS.md, 2026-11-29). HETFLOW_NODE_EXEC=1 execs every node.
bool nodes_by_fork(const topology::cluster& cl) {
  if (const char* e = std::getenv("HETFLOW_NODE_EXEC"); e != nullptr && std::strcmp(e, "1") == 0) return false;
  return cl.job.kind == "preprocess" && cl.plugins.empty() && single_threaded();
}

// A forked node's command line as `ps` and `pgrep -f` see it: what `hetflow
// node` would have had, written over this process's argument and
// environment strings (as setproctitle(3) does: the environment is copied
// to the heap first; the kernel shows a command line whose last NUL was
// overwritten up to its first NUL, through the environment's area). Cut to
// the room there is.
void set_command_line(const std::string& title) {
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return;
  // Fields after the command's ")": state is field 3; arg_start .. env_end
  // are fields 48 .. 51.
  std::istringstream in(stat.substr(close_paren + 2));
  std::string field;
  unsigned long long v[52] = {};
  for (int i = 3; i <= 51 && in >> field; ++i) v[i] = std::strtoull(field.c_str(), nullptr, 10);
  char* const arg_start = reinterpret_cast<char*>(v[48]);
  char* const env_end = reinterpret_cast<char*>(v[51]);
  if (arg_start == nullptr || env_end <= arg_start) return;
  // The environment strings move to the heap before their room is reused.
  std::size_t n = 0;
  while (environ[n] != nullptr) ++n;
  char** fresh = static_cast<char**>(std::malloc((n + 1) * sizeof(char*)));
  if (fresh == nullptr) return;
  for (std::size_t i = 0; i < n; ++i) fresh[i] = ::strdup(environ[i]);
  fresh[n] = nullptr;
  environ = fresh;
  const std::size_t room = static_cast<std::size_t>(env_end - arg_start);
  std::memset(arg_start, 0, room);
  std::memcpy(arg_start, title.data(), std::min(title.size(), room - 1));
}

struct child {
  std::string name;
  int index = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out_partial, err_partial;
  bool exited = false;
  int exit_code = -1;
  std::filesystem::path report;
  std::filesystem::path trace;  // the node's own trace file (--trace), merged after the job
  clock_type::time_point exited_at{};
  std::string cpus;  // HETFLOW_CPUS for the child (auto pinning), or empty
};

// [cluster] pin_local_nodes = "auto": with several local nodes and none with
// its own `cpus`, give each node its own contiguous CPUs: as many as its cpu
// devices' `threads` ask for (one more where there are enough), and the
// CPUs left over shared among the nodes that leave `threads` at 0 (at least
// one each): topology::local_cpu_shares. When the nodes ask for more
// CPUs than this process may use, nothing is pinned. Several nodes' threads
// (progress loops, compute pools, actors) otherwise migrate across the same
// cores; on a 2-core machine an unpinned 2-node 16 MiB all-reduce took 3-4 ms
// in some runs and 7-8 ms in others, pinned 3.0-3.8 ms in every run.
void plan_pinning(const topology::cluster& cl, std::vector<child>& children) {
  if (cl.runtime.pin_local_nodes != "auto" || children.size() < 2) return;
  for (const auto& c : children)
    if (!cl.nodes[std::size_t(c.index)].cpus.empty()) return;
  const std::vector<int> cpus = actors::usable_cpus();
  std::vector<int> local;
  for (const auto& c : children) local.push_back(c.index);
  const std::vector<std::vector<int>> pinned = topology::auto_pinned_cpus(cl, local, cpus);
  if (pinned.empty()) {
    std::size_t asked = 0;
    for (const auto& c : children) {
      std::size_t w = 0;
      for (const auto& d : cl.nodes[std::size_t(c.index)].devices)
        if (d.kind == topology::device_kind::cpu && d.threads > 0) w = std::max(w, std::size_t(d.threads));
      asked += std::max<std::size_t>(w, 1);
    }
    std::fprintf(stderr,
                 "hetflow run: not pinning the local nodes to CPUs: they ask for %zu on the %zu this "
                 "process may use\n",
                 asked, cpus.size());
    return;
  }
  std::string summary;
  for (std::size_t i = 0; i < children.size(); ++i) {
    children[i].cpus = topology::format_cpu_list(pinned[i]);
    summary += (summary.empty() ? "" : ", ") + children[i].name + " " + children[i].cpus;
  }
  std::fprintf(stderr,
               "hetflow run: pinning the local nodes to CPUs: %s ([cluster] pin_local_nodes = \"off\" "
               "leaves them unpinned)\n",
               summary.c_str());
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Writes complete lines of `data` (plus what was left over) with a prefix.
void emit_lines(std::string& partial, const char* data, std::size_t n, const std::string& prefix,
                FILE* out, bool flush_all) {
  partial.append(data, n);
  std::size_t start = 0;
  for (;;) {
    auto nl = partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::fprintf(out, "%s%.*s\n", prefix.c_str(), static_cast<int>(nl - start), partial.data() + start);
    start = nl + 1;
  }
  partial.erase(0, start);
  if (flush_all && !partial.empty()) {
    std::fprintf(out, "%s%s\n", prefix.c_str(), partial.c_str());
    partial.clear();
  }
  std::fflush(out);
}

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

local_pinning local_node_pinning(const topology::cluster& cl) {
  local_pinning out;
  for (int i = 0; i < static_cast<int>(cl.nodes.size()); ++i)
    if (host_is_local(cl.nodes[std::size_t(i)].host)) out.nodes.push_back(i);
  out.cpus = topology::auto_pinned_cpus(cl, out.nodes, actors::usable_cpus());
  if (out.cpus.empty()) {
    out.cpus.resize(out.nodes.size());
    for (std::size_t k = 0; k < out.nodes.size(); ++k) out.cpus[k] = cl.nodes[std::size_t(out.nodes[k])].cpus;
  }
  return out;
}

int run_local_cluster(const launch_options& opts, const actors::registry& reg) {
  auto parsed = topology::load_topology(opts.topology, reg.catalog());
  if (!parsed.ok()) {
    for (auto& d : parsed.errors) std::fprintf(stderr, "%s\n", topology::format(d).c_str());
    return 2;
  }
  topology::cluster cl = *parsed.model;
  if (!opts.strategy.empty()) cl.job.params.set("strategy", opts.strategy);  // what "auto" resolved to
  // Nodes the job survives losing (a streamed job's shard-only nodes): their
  // failure does not fail the run when the head finishes the job.
  std::set<int> expendable;
  if (auto all = actors::job_actors(cl, reg)) expendable = actors::expendable_nodes(cl, *all);
  std::vector<child> children;
  std::size_t width = 0;
  std::size_t remote = 0;
  for (int i = 0; i < static_cast<int>(cl.nodes.size()); ++i) {
    const auto& n = cl.nodes[i];
    if (!host_is_local(n.host)) {
      ++remote;
      std::fprintf(stderr,
                   "hetflow run: node '%s' is on host %s, which is not this machine; start it "
                   "there with `hetflow node %s --name %s%s%s`\n",
                   n.name.c_str(), n.host.c_str(), opts.topology.c_str(), n.name.c_str(),
                   opts.strategy.empty() ? "" : " --strategy ", opts.strategy.c_str());
      continue;
    }
    child c;
    c.name = n.name;
    c.index = i;
    children.push_back(std::move(c));
    width = std::max(width, n.name.size());
  }
  plan_pinning(cl, children);
  if (children.empty()) {
    std::fprintf(stderr,
                 "hetflow run: no node of %s is on this machine; start each node on its host "
                 "with `hetflow node %s --name NODE`\n",
                 opts.topology.c_str(), opts.topology.c_str());
    return 2;
  }

  // The nodes' reports (the head's PATH.job holds the job's metrics): for
  // --report, and for --plot, which draws from the same metrics; and the
  // nodes' traces for --trace.
  std::filesystem::path report_dir;
  if (!opts.report.empty() || !opts.plot.empty() || !opts.trace.empty()) {
    char tmpl[] = "/tmp/hetflow-run-XXXXXX";
    if (char* d = mkdtemp(tmpl)) {
      report_dir = d;
    } else if (!opts.trace.empty()) {
      // A trace was asked for and cannot be: say so before anything runs.
      std::fprintf(stderr, "hetflow run: cannot create %s for the nodes' traces (%s)\n", tmpl, std::strerror(errno));
      return 2;
    } else {
      std::fprintf(stderr, "hetflow run: cannot create %s for node reports (%s); the report "
                           "will lack per-node details and there will be no plot\n", tmpl, std::strerror(errno));
    }
  }

  // Take SIGINT/SIGTERM/SIGCHLD through a signalfd so the poll loop sees them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  sigset_t old_mask;
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  std::string self_exe = "/proc/self/exe";
  char exe_buf[4096] = {};
  if (ssize_t n = readlink("/proc/self/exe", exe_buf, sizeof exe_buf - 1); n > 0) self_exe = exe_buf;
  pid_t launcher_pid = getpid();
  const bool by_fork = nodes_by_fork(cl);
  if (by_fork)
    std::fprintf(stderr, "hetflow run: the local nodes are forks of this process, not exec'd (a preprocess job; "
                         "HETFLOW_NODE_EXEC=1 execs them)\n");
  auto t0 = clock_type::now();

  for (auto& c : children) {
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::perror("hetflow run: pipe");
      return 1;
    }
    if (!report_dir.empty() && (!opts.report.empty() || !opts.plot.empty()))
      c.report = report_dir / (c.name + ".json");
    if (!report_dir.empty() && !opts.trace.empty()) c.trace = report_dir / (c.name + ".trace.json");
    std::vector<std::string> args = {self_exe, "node", opts.topology.string(), "--name", c.name};
    if (!c.report.empty()) {
      args.push_back("--report");
      args.push_back(c.report.string());
    }
    if (!c.trace.empty()) {
      args.push_back("--trace");
      args.push_back(c.trace.string());
    }
    if (opts.join_timeout_s) {
      args.push_back("--join-timeout");
      args.push_back(std::to_string(*opts.join_timeout_s));
    }
    if (opts.resume) args.push_back("--resume");
    if (!opts.strategy.empty()) {
      args.push_back("--strategy");
      args.push_back(opts.strategy);
    }
    std::fflush(nullptr);  // a forked node must not write the launcher's buffered output again
    std::cout.flush();
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("hetflow run: fork");
      return 1;
    }
    if (pid == 0) {
      // Child: die with the launcher, whatever kills it (no orphans ever).
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      // Own process group: a terminal's Ctrl-C reaches the launcher, which
      // forwards it once, instead of every node seeing it twice.
      setpgid(0, 0);
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      setenv("HETFLOW_LAUNCHED", "1", 1);
      if (!c.cpus.empty())
        setenv("HETFLOW_CPUS", c.cpus.c_str(), 1);
      else
        unsetenv("HETFLOW_CPUS");
      if (by_fork) {
        // What exec would have closed: the launcher's signalfd and every
        // pipe end but this node's stdout and stderr.
        ::close(sfd);
        for (const auto& o : children) {
          if (o.out_fd >= 0) ::close(o.out_fd);
          if (o.err_fd >= 0) ::close(o.err_fd);
        }
        for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
        actors::node_options o;
        o.topology = opts.topology;
        o.name = c.name;
        o.report = c.report;
        o.trace = c.trace;
        if (auto max = kernels::trace::max_events_from_env()) o.trace_max_events = *max;
        o.join_timeout_s = opts.join_timeout_s;
        o.resume = opts.resume;
        o.strategy = opts.strategy;
        std::string title;
        for (const auto& a : args) title += (title.empty() ? "" : " ") + a;
        set_command_line(title);
        const int rc = actors::run_node(o, reg);
        std::fflush(nullptr);
        std::exit(rc);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(self_exe.c_str(), argv.data());
      std::fprintf(stderr, "cannot exec %s: %s\n", self_exe.c_str(), std::strerror(errno));
      _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    // Non-blocking: a quiet stream must never stall the loop.
    fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
    c.pid = pid;
    c.out_fd = out_pipe[0];
    c.err_fd = err_pipe[0];
  }

  auto prefix_of = [&](const child& c) {
    std::string p = "[" + c.name + "]";
    p.append(width - c.name.size() + 1, ' ');
    return p;
  };
  auto send_all = [&](int sig) {
    for (auto& c : children)
      if (!c.exited) kill(c.pid, sig);
  };

  int signals_seen = 0;
  bool terminating = false;
  clock_type::time_point term_sent{};
  clock_type::time_point first_failure{};
  bool failure_seen = false;
  bool refused = false;  // a node exited 2 and the launcher stopped the others
  char buf[65536];

  for (;;) {
    bool all_exited = true;
    for (auto& c : children) all_exited = all_exited && c.exited && c.out_fd < 0 && c.err_fd < 0;
    if (all_exited) break;

    std::vector<pollfd> fds;
    fds.push_back({sfd, POLLIN, 0});
    for (auto& c : children) {
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0});
      if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 200);

    // Signals.
    signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
        ++signals_seen;
        if (signals_seen == 1) {
          std::fprintf(stderr, "hetflow run: %s received; stopping every node (again to kill)\n",
                       si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
          send_all(static_cast<int>(si.ssi_signo));
          terminating = true;
          term_sent = clock_type::now();
        } else {
          send_all(SIGKILL);
        }
      }
    }
    // Output.
    for (auto& c : children) {
      for (int* fd : {&c.out_fd, &c.err_fd}) {
        if (*fd < 0) continue;
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n > 0) {
          bool is_out = fd == &c.out_fd;
          emit_lines(is_out ? c.out_partial : c.err_partial, buf, static_cast<std::size_t>(n),
                     prefix_of(c), is_out ? stdout : stderr, false);
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          bool is_out = fd == &c.out_fd;
          emit_lines(is_out ? c.out_partial : c.err_partial, "", 0, prefix_of(c),
                     is_out ? stdout : stderr, true);
          close(*fd);
          *fd = -1;
        }
      }
    }
    // Exits.
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        c.exit_code = decode_wait_status(status);
        c.exited_at = clock_type::now();
        if (c.exit_code != 0 && !failure_seen && !expendable.count(c.index)) {
          failure_seen = true;
          first_failure = c.exited_at;
        }
        // Exit 2: the node refused to start (its configuration, a device,
        // CPUs or plugin it cannot have); the others would only wait for it
        // until their join timeout.
        if (c.exit_code == 2 && !terminating) {
          std::fprintf(stderr, "hetflow run: node '%s' refused to start (exit 2, its message above); stopping the "
                               "other nodes\n", c.name.c_str());
          send_all(SIGTERM);
          terminating = true;
          refused = true;
          term_sent = c.exited_at;
        }
      }
    }
    auto now = clock_type::now();
    // A failed node: the others notice within seconds and stop by themselves;
    // if they have not after 10 s, terminate them, and kill after 5 s more.
    if (failure_seen && !terminating && now - first_failure > std::chrono::seconds(10)) {
      std::fprintf(stderr, "hetflow run: nodes still running 10 s after a failure; terminating\n");
      send_all(SIGTERM);
      terminating = true;
      term_sent = now;
    }
    if (terminating && now - term_sent > std::chrono::seconds(5)) {
      send_all(SIGKILL);
      term_sent = now + std::chrono::hours(1);
    }
  }
  close(sfd);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  double wall = std::chrono::duration<double>(clock_type::now() - t0).count();

  // The job's status: the head's exit code when the head ran here, else the
  // first non-zero one.
  int code = 0;
  const child* head = nullptr;
  for (auto& c : children)
    if (c.index == 0) head = &c;
  if (head != nullptr) code = head->exit_code;
  std::string lost;
  if (code == 0)
    for (auto& c : children) {
      if (c.exit_code == 0) continue;
      if (head != nullptr && expendable.count(c.index)) {
        // The head finished the job without it (its shards' steps were taken over).
        lost += (lost.empty() ? "" : ", ") + c.name + " (exit " + std::to_string(c.exit_code) + ")";
        continue;
      }
      code = c.exit_code;
      break;
    }
  if (code == 0 && !lost.empty())
    std::fprintf(stderr, "hetflow run: nodes lost during the job, which finished without them: %s\n", lost.c_str());
  if (signals_seen > 0 && code == 0) code = 130;
  if (refused && signals_seen == 0) code = 2;  // the refusal, not the stop it caused

  std::string failed;
  for (auto& c : children)
    if (c.exit_code != 0)
      failed += (failed.empty() ? "" : ", ") + c.name + " (exit " + std::to_string(c.exit_code) + ")";
  if (code == 0)
    std::fprintf(stdout, "hetflow run: job '%s' of cluster '%s' finished in %.2f s\n",
                 cl.job.kind.c_str(), cl.name.c_str(), wall);
  else
    std::fprintf(stderr, "hetflow run: job '%s' of cluster '%s' FAILED (exit %d) after %.2f s; %s\n",
                 cl.job.kind.c_str(), cl.name.c_str(), code, wall,
                 failed.empty() ? "" : ("nodes: " + failed).c_str());

  if (!opts.report.empty() || !opts.plot.empty()) {
    actors::json_writer w;
    w.begin_object();
    w.field("cluster", cl.name).field("topology", cl.file.string());
    w.field("wall_s", wall).field("launcher_exit_code", code);
    // Job-level members come from the head's PATH.job ("job", "status",
    // "exit_code", "message", "run_s", the job kind's own members such as
    // "result" or "epochs", and "actors"); they are lifted to the top level.
    std::string job;
    if (head != nullptr && !head->report.empty()) {
      auto job_path = head->report;
      job_path += ".job";
      job = read_file(job_path);
    }
    if (job.size() > 2 && job.front() == '{' && job.back() == '}') {
      w.raw(std::string_view(job).substr(1, job.size() - 2));
    } else {
      w.field("job", cl.job.kind).field("status", code == 0 ? "ok" : "failed");
      w.field("exit_code", code);
      w.field("message", head == nullptr ? "the head node does not run on this machine"
                                         : "the head node wrote no job report");
    }
    w.key("nodes").begin_array();
    for (auto& c : children) {
      std::string frag = c.report.empty() ? std::string{} : read_file(c.report);
      if (frag.empty()) {
        w.begin_object().field("node", c.name).field("status", "failed");
        w.field("exit_code", c.exit_code).field("message", "node wrote no report").end_object();
      } else {
        w.raw(frag);
      }
    }
    w.end_array();
    w.end_object();
    if (!opts.report.empty()) {
      std::ofstream out(opts.report, std::ios::trunc);
      out << w.str() << "\n";
      if (!out) std::fprintf(stderr, "hetflow run: cannot write report %s\n", opts.report.c_str());
    }
    if (!opts.plot.empty()) {
      // Never changes the job's exit status: a job without a plot says why.
      auto p = write_training_plot(w.str(), "", opts.plot);
      if (p)
        std::fprintf(stdout, "hetflow run: plot written to %s (%zu epochs, %zu history points)\n",
                     opts.plot.c_str(), p->epochs.size(), p->history.size());
      else if (job.empty())
        std::fprintf(stderr, "hetflow run: no plot written to %s: %s\n", opts.plot.c_str(),
                     head == nullptr ? "the head node does not run on this machine (plot its --report with "
                                       "`hetflow plot`)"
                                     : "the head node wrote no job report");
      else
        std::fprintf(stderr, "hetflow run: no plot written to %s: %s\n", opts.plot.c_str(),
                     p.error().message().c_str());
    }
  }
  if (!opts.trace.empty()) {
    // One document, the nodes in topology order (pid = node index). Never
    // changes the job's exit status.
    std::vector<std::filesystem::path> files;
    for (auto& c : children) files.push_back(c.trace);
    const std::string note = code == 0 ? "ok" : "failed (exit " + std::to_string(code) + "); events until it stopped";
    auto m = kernels::trace::merge_files(files, opts.trace, note);
    if (!m) {
      std::fprintf(stderr, "hetflow run: no trace written: %s\n", m.error().message().c_str());
    } else {
      for (auto& why : m->skipped) std::fprintf(stderr, "hetflow run: trace: %s\n", why.c_str());
      std::string what = std::to_string(m->events) + " events from " + std::to_string(m->files) + " node" +
                         (m->files == 1 ? "" : "s");
      if (m->dropped > 0)
        what += ", " + std::to_string(m->dropped) + " dropped over the bound (HETFLOW_TRACE_MAX_EVENTS)";
      if (remote > 0)
        what += "; nodes on other hosts write their own with `hetflow node --trace`";
      if (code == 0)
        std::fprintf(stdout, "hetflow run: trace written to %s (%s; open it in https://ui.perfetto.dev)\n",
                     opts.trace.c_str(), what.c_str());
      else
        std::fprintf(stderr, "hetflow run: trace of the FAILED job written to %s (what was recorded until it "
                             "stopped: %s)\n", opts.trace.c_str(), what.c_str());
    }
  }
  if (!report_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(report_dir, ec);
  }
  return code;
}

}  // namespace hetflow::apps
