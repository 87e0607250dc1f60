#include "apps/shell_command.hpp"

#include <editline/readline.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/cluster_auth.hpp"
#include "actors/plugin_loader.hpp"
#include "actors/registry.hpp"
#include "actors/shell_client.hpp"
#include "topology/parser.hpp"
#include "topology/suggest.hpp"

namespace hetflow::apps {
namespace {

using json = nlohmann::json;

constexpr const char* usage =
    "usage: hetflow shell HOST:PORT [--topology FILE] [-c COMMAND] [--json] [--timeout SECONDS]\n"
    "  HOST:PORT   any node of a running job (its host and port in the topology)\n"
    "  --topology  the job's topology file: the shell proves its [cluster] secret_file /\n"
    "              secret_env like a node (else the file named by HETFLOW_SECRET_FILE)\n"
    "  -c COMMAND  run one command and exit (0 ok, 1 the command failed, 3 unreachable)\n"
    "  --json      with -c: print JSON\n"
    "  --timeout   seconds for each connect and request (5)\n";

constexpr const char* help_text =
    "commands (each node answers about itself; the shell asks every node):\n"
    "  nodes             every node: address, up/unreachable, uptime, memory, data-plane bytes\n"
    "  actors [NODE]     every actor: type, node, state, mailbox, progress, wire traffic in (total and per\n"
    "                    second over the last second) and what it waits for\n"
    "  stat ACTOR        everything known about one actor: gauges, its waits, who waits on it\n"
    "  waits             who waits on whom right now, on every node, and for how long\n"
    "  clocks            training progress per training actor; ps/ralp: each server's global clock, the\n"
    "                    slowest/fastest worker, the spread (staleness now) and its bound; each worker's clock\n"
    "  plan              the running job's placement: every actor, its type and node\n"
    "  top               actors and waits, refreshed every second until a key (interactive only)\n"
    "  kill ACTOR        fault drill: the actor's node sends it exit(kill); the job fails as on a crash\n"
    "  pause ACTOR       a HetPipe stage starts no new minibatch until resume (past ps_timeout the job fails)\n"
    "  resume ACTOR      undo pause\n"
    "  set staleness D   HetPipe: every WSP shard takes the bound D from its next message\n"
    "  checkpoint        ps, ralp: one more checkpoint of every parameter server at one clock (a little ahead of the\n"
    "                    fastest worker), written when the global clock reaches it; --resume can use it\n"
    "  help              this text\n"
    "  quit, exit        leave (also Ctrl-D)\n";

const std::vector<std::string> command_names = {"nodes", "actors", "stat", "waits",      "clocks", "plan", "top",
                                                "kill",  "help",   "quit", "exit",       "pause",  "resume",
                                                "set",   "checkpoint"};

struct outcome {
  int rc = 0;
  std::string out;  // stdout
  std::string err;  // stderr (one line per problem)
};

outcome failure(int rc, std::string msg) { return outcome{rc, {}, std::move(msg) + "\n"}; }

void appendf(std::string& s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& s, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    s.append(buf, static_cast<std::size_t>(n));
    return;
  }
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<std::size_t>(n));
  s += big;
}

std::string human_bytes(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) {
    b /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.1f %s", b, units[i]);
  return buf;
}

std::string human_seconds(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

std::string number(double v) {
  char buf[32];
  if (std::abs(v) < 1e15 && v == double(int64_t(v)))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (std::abs(v) >= 1000 && std::abs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

double num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::optional<double> gauge(const json& actor, const char* key) {
  auto g = actor.find("gauges");
  if (g == actor.end() || !g->is_object()) return std::nullopt;
  auto it = g->find(key);
  if (it == g->end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// `name` occurs in `text` as a whole word (so "ps1" is not found in "ps10").
bool mentions(const std::string& text, const std::string& name) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
  for (std::size_t p = text.find(name); p != std::string::npos; p = text.find(name, p + 1)) {
    bool before = p == 0 || !word(text[p - 1]);
    bool after = p + name.size() >= text.size() || !word(text[p + name.size()]);
    if (before && after) return true;
  }
  return false;
}

std::string wait_text(const json& w) {
  return str(w, "actor") + " waits on " + str(w, "on") + " for " + str(w, "what") + " (" +
         human_seconds(num(w, "seconds")) + ")";
}

// One line of what an actor is doing: training or pre-processing progress
// from its gauges, else a few gauges; then what it waits for.
std::string progress_line(const json& a, const json& waits) {
  std::string s;
  if (auto e = gauge(a, "train_epoch")) {
    appendf(s, "epoch %s step %s/%s loss %.4f acc %.4f %.0f samples/s", number(*e).c_str(),
            number(gauge(a, "train_step").value_or(0)).c_str(),
            number(gauge(a, "train_steps_per_epoch").value_or(0)).c_str(), gauge(a, "train_loss").value_or(0),
            gauge(a, "train_accuracy").value_or(0), gauge(a, "train_samples_per_second").value_or(0));
  } else if (auto c = gauge(a, "ps_clock")) {
    appendf(s, "clock %s", number(*c).c_str());
  } else if (auto g = gauge(a, "ps_global_clock")) {
    appendf(s, "global clock %s, spread %s", number(*g).c_str(), number(gauge(a, "ps_clock_spread").value_or(0)).c_str());
  } else if (a.contains("gauges") && a["gauges"].is_object()) {
    int shown = 0;
    for (auto& [k, v] : a["gauges"].items()) {
      if (!v.is_number() || k.starts_with("actor_wire_")) continue;
      if (shown++ == 3) {
        s += " ...";
        break;
      }
      s += (s.empty() ? "" : " ") + k + "=" + number(v.get<double>());
    }
  }
  // Wire traffic delivered to it on its node (the node's counters), and its
  // rate over the node's last one-second sample.
  if (auto m = gauge(a, "actor_wire_received_messages_total")) {
    s += std::string(s.empty() ? "" : "; ") + "in: " + number(*m) + " msgs " +
         human_bytes(gauge(a, "actor_wire_received_bytes_total").value_or(0));
    if (auto r = gauge(a, "actor_wire_received_messages_per_second"))
      appendf(s, " (%.1f msgs/s, %s/s)", *r,
              human_bytes(gauge(a, "actor_wire_received_bytes_per_second").value_or(0)).c_str());
  }
  for (auto& w : waits)
    if (str(w, "actor") == str(a, "name"))
      s += std::string(s.empty() ? "" : "; ") + "waits on " + str(w, "on") + " for " + str(w, "what") + " (" +
           human_seconds(num(w, "seconds")) + ")";
  return s.empty() ? "-" : s;
}

struct node_view {
  std::string name, host;
  int port = 0;
  bool up = false;
  std::string error;
  json state;
};

class session {
public:
  session(actors::shell_client& client, std::string host, int port)
      : client_(client), host_(std::move(host)), port_(port) {}

  // The entry node's state (HOST:PORT); errors: unreachable or refused.
  expected<json> entry() {
    auto r = client_.state(host_, port_);
    if (!r) return r.error();
    if (!r->ok) return make_error(errc::internal, "node '" + r->node + "': " + r->body);
    try {
      last_entry_ = json::parse(r->body);
    } catch (const std::exception& e) {
      return make_error(errc::wire_corrupt, "node '" + r->node + "' sent a state that is not JSON: " + e.what());
    }
    return last_entry_;
  }

  // Every node of the cluster: the entry's state reused, the others asked.
  std::vector<node_view> everyone(const json& e) {
    std::vector<node_view> out;
    for (auto& n : e.value("nodes", json::array())) {
      node_view v{str(n, "name"), str(n, "host"), int(num(n, "port")), false, {}, {}};
      if (v.name == str(e, "node")) {
        v.up = true;
        v.state = e;
      } else {
        auto r = client_.state(v.host, v.port);
        if (!r) {
          v.error = r.error().message();
        } else if (!r->ok) {
          v.error = r->body;
        } else if (r->node != v.name) {
          v.error = "the node at " + v.host + ":" + std::to_string(v.port) + " says it is '" + r->node + "'";
        } else {
          try {
            v.state = json::parse(r->body);
            v.up = true;
          } catch (const std::exception& ex) {
            v.error = std::string("its state is not JSON: ") + ex.what();
          }
        }
      }
      out.push_back(std::move(v));
    }
    return out;
  }

  std::vector<std::string> actor_names() const {
    std::vector<std::string> out;
    for (auto& a : last_entry_.value("placement", json::array())) out.push_back(str(a, "name"));
    return out;
  }
  std::vector<std::string> node_names() const {
    std::vector<std::string> out;
    for (auto& n : last_entry_.value("nodes", json::array())) out.push_back(str(n, "name"));
    return out;
  }
  const json& last_entry() const { return last_entry_; }

  outcome run(const std::string& line, bool as_json) {
    std::istringstream is(line);
    std::vector<std::string> w;
    for (std::string t; is >> t;) w.push_back(t);
    if (w.empty()) return {};
    const std::string& cmd = w[0];
    const std::vector<std::string> args(w.begin() + 1, w.end());
    if (cmd == "help" || cmd == "?") return outcome{0, help_text, {}};
    if (cmd == "quit" || cmd == "exit") return {};
    if (cmd == "top") return failure(1, "top is interactive only (it refreshes until a key); with -c use actors or waits");
    auto takes = [&](std::size_t lo, std::size_t hi, const char* form) -> std::optional<outcome> {
      if (args.size() < lo || args.size() > hi) return failure(1, std::string("usage: ") + form);
      return std::nullopt;
    };
    using handler = outcome (session::*)(const json&, const std::vector<std::string>&, bool);
    struct entry_cmd {
      const char* name;
      std::size_t lo, hi;
      const char* form;
      handler h;
    };
    static const entry_cmd table[] = {
        {"nodes", 0, 0, "nodes", &session::nodes},        {"actors", 0, 1, "actors [NODE]", &session::actors},
        {"stat", 1, 1, "stat ACTOR", &session::stat},      {"waits", 0, 0, "waits", &session::waits},
        {"clocks", 0, 0, "clocks", &session::clocks},     {"plan", 0, 0, "plan", &session::plan},
        {"kill", 1, 1, "kill ACTOR", &session::kill_actor},
        {"pause", 1, 1, "pause ACTOR", &session::pause_actor},
        {"resume", 1, 1, "resume ACTOR", &session::resume_actor},
        {"set", 2, 2, "set staleness D", &session::set_value},
        {"checkpoint", 0, 0, "checkpoint", &session::checkpoint},
    };
    for (auto& c : table) {
      if (cmd != c.name) continue;
      if (auto bad = takes(c.lo, c.hi, c.form)) return *bad;
      auto e = entry();
      if (!e) return failure(3, "hetflow shell: " + e.error().message());
      return (this->*c.h)(*e, args, as_json);
    }
    std::string hint = topology::did_you_mean(cmd, command_names);
    return failure(1, "unknown command '" + cmd + "'" + (hint.empty() ? "" : " (" + hint.substr(2) + ")") +
                          "; try help");
  }

  // For top: the nodes with their data-plane rates since the previous
  // call, then actors and waits (one round of requests).
  outcome overview() {
    auto e = entry();
    if (!e) return failure(3, "hetflow shell: " + e.error().message());
    const auto all = everyone(*e);
    const auto now = std::chrono::steady_clock::now();
    std::string head;
    appendf(head, "%-12s %-22s %-12s %10s %12s %12s %12s\n", "NODE", "ADDRESS", "STATE", "RSS", "DP SENT/s",
            "DP RECV/s", "MSGS/s");
    for (auto& v : all) {
      const std::string addr = v.host + ":" + std::to_string(v.port);
      if (!v.up) {
        appendf(head, "%-12s %-22s %-12s %10s %12s %12s %12s\n", v.name.c_str(), addr.c_str(), "unreachable", "-", "-",
                "-", "-");
        continue;
      }
      const json d = v.state.value("data_plane_stats", json::object());
      const double sent = num(d, "bytes_sent"), recv = num(d, "bytes_received"),
                   msgs = num(d, "messages_sent") + num(d, "messages_received");
      std::string rs = "-", rr = "-", rm = "-";
      if (auto it = rates_.find(v.name); it != rates_.end()) {
        const double dt = std::chrono::duration<double>(now - it->second.at).count();
        if (dt > 0.05) {
          rs = human_bytes(std::max(0.0, sent - it->second.sent) / dt);
          rr = human_bytes(std::max(0.0, recv - it->second.received) / dt);
          rm = number(std::round(std::max(0.0, msgs - it->second.messages) / dt));
        }
      }
      rates_[v.name] = sample{now, sent, recv, msgs};
      appendf(head, "%-12s %-22s %-12s %10s %12s %12s %12s\n", v.name.c_str(), addr.c_str(), "up",
              human_bytes(num(v.state, "rss_bytes")).c_str(), rs.c_str(), rr.c_str(), rm.c_str());
    }
    outcome a = actors_of(*e, all, {}, false), w = waits_of(all, false);
    return outcome{std::max(a.rc, w.rc), head + "\n" + a.out + "\n" + w.out, a.err};
  }

private:
  static std::string unreachable_note(const std::vector<node_view>& all) {
    std::string s;
    for (auto& v : all)
      if (!v.up) s += "node '" + v.name + "' (" + v.host + ":" + std::to_string(v.port) + ") is unreachable: " + v.error + "\n";
    return s;
  }

  outcome nodes(const json& e, const std::vector<std::string>&, bool as_json) {
    auto all = everyone(e);
    outcome o;
    if (as_json) {
      json j = {{"cluster", str(e, "cluster")}, {"job", str(e, "job")}, {"strategy", str(e, "strategy")},
                {"nodes", json::array()}};
      for (auto& v : all) {
        json n = {{"name", v.name}, {"host", v.host}, {"port", v.port}, {"state", v.up ? "up" : "unreachable"}};
        if (v.up) {
          const json& s = v.state;
          const json d = s.value("data_plane_stats", json::object());
          n.update(json{{"uptime_s", num(s, "uptime_s")},
                    {"rss_bytes", num(s, "rss_bytes")},
                    {"job_running", s.value("job_running", false)},
                    {"data_plane", str(s, "data_plane")},
                    {"messages_sent", num(d, "messages_sent")},
                    {"bytes_sent", num(d, "bytes_sent")},
                    {"messages_received", num(d, "messages_received")},
                    {"bytes_received", num(d, "bytes_received")}});
        } else {
          n["error"] = v.error;
        }
        j["nodes"].push_back(n);
      }
      o.out = j.dump(2) + "\n";
      return o;
    }
    std::string strategy = str(e, "strategy");
    appendf(o.out, "cluster '%s', job '%s'%s, %zu node%s\n", str(e, "cluster").c_str(), str(e, "job").c_str(),
            strategy.empty() ? "" : (" (strategy " + strategy + ")").c_str(), all.size(), all.size() == 1 ? "" : "s");
    appendf(o.out, "%-12s %-22s %-12s %9s %10s %11s %11s  %s\n", "NODE", "ADDRESS", "STATE", "UPTIME", "RSS",
            "DP SENT", "DP RECV", "JOB");
    for (auto& v : all) {
      const std::string addr = v.host + ":" + std::to_string(v.port);
      if (!v.up) {
        appendf(o.out, "%-12s %-22s %-12s %9s %10s %11s %11s  %s\n", v.name.c_str(), addr.c_str(), "unreachable", "-",
                "-", "-", "-", "-");
        continue;
      }
      const json& s = v.state;
      const json d = s.value("data_plane_stats", json::object());
      appendf(o.out, "%-12s %-22s %-12s %9s %10s %11s %11s  %s\n", v.name.c_str(), addr.c_str(), "up",
              human_seconds(num(s, "uptime_s")).c_str(), human_bytes(num(s, "rss_bytes")).c_str(),
              human_bytes(num(d, "bytes_sent")).c_str(), human_bytes(num(d, "bytes_received")).c_str(),
              s.value("job_running", false) ? "running" : "stopping");
    }
    o.err = unreachable_note(all);
    return o;
  }

  // Every actor with its node's state (or unreachable), in placement order.
  struct actor_row {
    json actor;  // from its node's state; {name,type,node,state:"unreachable"} if the node is
    json waits;  // its node's open waits
  };
  std::vector<actor_row> actor_rows(const json& e, const std::vector<node_view>& all) {
    std::vector<actor_row> rows;
    for (auto& p : e.value("placement", json::array())) {
      actor_row r;
      r.actor = json{{"name", str(p, "name")}, {"type", str(p, "type")}, {"node", str(p, "node")},
                     {"state", "unreachable"}, {"mailbox", nullptr}, {"gauges", json::object()}};
      r.waits = json::array();
      for (auto& v : all) {
        if (v.name != str(p, "node") || !v.up) continue;
        r.waits = v.state.value("waits", json::array());
        for (auto& a : v.state.value("actors", json::array()))
          if (str(a, "name") == str(p, "name")) r.actor = a;
      }
      rows.push_back(std::move(r));
    }
    return rows;
  }

  outcome actors(const json& e, const std::vector<std::string>& args, bool as_json) {
    return actors_of(e, everyone(e), args, as_json);
  }
  outcome actors_of(const json& e, const std::vector<node_view>& all, const std::vector<std::string>& args,
                    bool as_json) {
    if (!args.empty()) {
      auto names = node_names();
      if (std::find(names.begin(), names.end(), args[0]) == names.end()) {
        std::string list;
        for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
        return failure(1, "unknown node '" + args[0] + "'" + topology::did_you_mean(args[0], names) +
                              " (the nodes: " + list + ")");
      }
    }
    auto rows = actor_rows(e, all);
    if (!args.empty())
      rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const actor_row& r) { return str(r.actor, "node") != args[0]; }),
                 rows.end());
    outcome o;
    if (as_json) {
      json j = {{"actors", json::array()}};
      for (auto& r : rows) {
        json a = r.actor;
        a["waits"] = json::array();
        for (auto& w : r.waits)
          if (str(w, "actor") == str(a, "name")) a["waits"].push_back(w);
        j["actors"].push_back(a);
      }
      o.out = j.dump(2) + "\n";
      return o;
    }
    std::size_t wn = 5, wt = 4;
    for (auto& r : rows) {
      wn = std::max(wn, str(r.actor, "name").size());
      wt = std::max(wt, str(r.actor, "type").size());
    }
    appendf(o.out, "%-*s %-*s %-10s %-11s %-7s %s\n", int(wn), "ACTOR", int(wt), "TYPE", "NODE", "STATE", "MAILBOX",
            "PROGRESS / WAITS");
    for (auto& r : rows)
      appendf(o.out, "%-*s %-*s %-10s %-11s %-7s %s\n", int(wn), str(r.actor, "name").c_str(), int(wt),
              str(r.actor, "type").c_str(), str(r.actor, "node").c_str(), str(r.actor, "state").c_str(),
              mailbox_of(r.actor).c_str(), progress_line(r.actor, r.waits).c_str());
    appendf(o.out,
            "(%zu actor%s; MAILBOX: wire messages delivered and not yet let go - queued or kept by the actor; "
            "n/a before its first)\n",
            rows.size(), rows.size() == 1 ? "" : "s");
    o.err = unreachable_note(all);
    return o;
  }

  // An actor's "mailbox" field as text: its pending wire messages, or n/a.
  static std::string mailbox_of(const json& a) {
    auto it = a.find("mailbox");
    return it != a.end() && it->is_number() ? std::to_string(it->get<int64_t>()) : std::string("n/a");
  }

  // The placement entry of `name`, or a "did you mean" failure.
  std::optional<json> find_actor(const json& e, const std::string& name, outcome& fail) {
    for (auto& p : e.value("placement", json::array()))
      if (str(p, "name") == name) return p;
    auto names = actor_names();
    std::string hint = topology::did_you_mean(name, names);
    if (hint.empty()) {
      std::string list;
      for (std::size_t i = 0; i < names.size() && i < 12; ++i) list += (i ? ", " : "") + names[i];
      if (names.size() > 12) list += ", ...";
      hint = " (the actors: " + list + ")";
    }
    fail = failure(1, "unknown actor '" + name + "'" + hint);
    return std::nullopt;
  }

  outcome stat(const json& e, const std::vector<std::string>& args, bool as_json) {
    outcome fail;
    auto p = find_actor(e, args[0], fail);
    if (!p) return fail;
    auto all = everyone(e);
    auto rows = actor_rows(e, all);
    json a;
    json own_waits = json::array(), on_it = json::array();
    for (auto& r : rows)
      if (str(r.actor, "name") == args[0]) a = r.actor;
    for (auto& v : all) {
      if (!v.up) continue;
      for (auto& w : v.state.value("waits", json::array())) {
        json x = w;
        x["node"] = v.name;
        if (str(w, "actor") == args[0])
          own_waits.push_back(x);
        else if (mentions(str(w, "on"), args[0]))
          on_it.push_back(x);
      }
    }
    outcome o;
    if (as_json) {
      json j = a;
      j["waits"] = own_waits;
      j["waited_on_by"] = on_it;
      o.out = j.dump(2) + "\n";
      return o;
    }
    std::string addr;
    for (auto& v : all)
      if (v.name == str(a, "node")) addr = v.host + ":" + std::to_string(v.port);
    appendf(o.out, "actor %s (type %s) on node %s (%s)\n", str(a, "name").c_str(), str(a, "type").c_str(),
            str(a, "node").c_str(), addr.c_str());
    appendf(o.out, "  state      %s\n", str(a, "state").c_str());
    appendf(o.out, "  mailbox    %s (wire messages delivered and not yet let go: queued, or kept by the actor)\n",
            mailbox_of(a).c_str());
    const json g = a.value("gauges", json::object());
    if (g.empty()) appendf(o.out, "  gauges     none (this actor type publishes no metrics gauges)\n");
    for (auto& [k, v] : g.items())
      if (v.is_number()) appendf(o.out, "  %-36s %s\n", k.c_str(), number(v.get<double>()).c_str());
    if (own_waits.empty()) appendf(o.out, "  waits      none right now\n");
    for (auto& w : own_waits) appendf(o.out, "  waits      on %s for %s (%s)\n", str(w, "on").c_str(),
                                      str(w, "what").c_str(), human_seconds(num(w, "seconds")).c_str());
    if (on_it.empty()) appendf(o.out, "  waited on  by nobody right now\n");
    for (auto& w : on_it)
      appendf(o.out, "  waited on  by %s on node %s: %s\n", str(w, "actor").c_str(), str(w, "node").c_str(),
              wait_text(w).c_str());
    o.err = unreachable_note(all);
    return o;
  }

  outcome waits(const json& e, const std::vector<std::string>&, bool as_json) {
    return waits_of(everyone(e), as_json);
  }
  outcome waits_of(const std::vector<node_view>& all, bool as_json) {
    std::vector<json> open;
    for (auto& v : all) {
      if (!v.up) continue;
      for (auto& w : v.state.value("waits", json::array())) {
        json x = w;
        x["node"] = v.name;
        open.push_back(x);
      }
    }
    std::stable_sort(open.begin(), open.end(),
                     [](const json& a, const json& b) { return num(a, "seconds") > num(b, "seconds"); });
    outcome o;
    if (as_json) {
      json j = {{"waits", open}, {"unreachable", json::array()}};
      for (auto& v : all)
        if (!v.up) j["unreachable"].push_back({{"node", v.name}, {"error", v.error}});
      o.out = j.dump(2) + "\n";
      return o;
    }
    if (open.empty()) {
      std::size_t up = 0;
      for (auto& v : all) up += v.up ? 1 : 0;
      appendf(o.out, "no actor waits on another right now (%zu node%s asked)\n", up, up == 1 ? "" : "s");
    }
    for (auto& w : open) appendf(o.out, "%-10s %s\n", str(w, "node").c_str(), wait_text(w).c_str());
    o.err = unreachable_note(all);
    return o;
  }

  outcome clocks(const json& e, const std::vector<std::string>&, bool as_json) {
    auto all = everyone(e);
    auto rows = actor_rows(e, all);
    json training = json::array(), clock_waits = json::array(), ps_workers = json::array(),
         ps_servers = json::array();
    for (auto& r : rows) {
      const json& a = r.actor;
      // Parameter servers (ps shards, the ralp server) and their workers.
      if (auto c = gauge(a, "ps_clock")) {
        json w = {{"actor", str(a, "name")}, {"node", str(a, "node")}, {"clock", *c}};
        // HetPipe stages: minibatches between forward and backward there now.
        if (auto f = gauge(a, "hetpipe_in_flight")) w["in_flight"] = *f;
        ps_workers.push_back(w);
      }
      if (auto g = gauge(a, "ps_global_clock"))
        ps_servers.push_back({{"actor", str(a, "name")},
                              {"node", str(a, "node")},
                              {"global_clock", *g},
                              {"slowest_clock", gauge(a, "ps_slowest_clock").value_or(0)},
                              {"fastest_clock", gauge(a, "ps_fastest_clock").value_or(0)},
                              {"spread", gauge(a, "ps_clock_spread").value_or(0)},
                              {"staleness_bound", gauge(a, "ps_staleness_bound").value_or(0)}});
      if (!gauge(a, "train_epoch")) continue;
      training.push_back({{"actor", str(a, "name")},
                          {"node", str(a, "node")},
                          {"epoch", gauge(a, "train_epoch").value_or(0)},
                          {"step", gauge(a, "train_step").value_or(0)},
                          {"steps_per_epoch", gauge(a, "train_steps_per_epoch").value_or(0)},
                          {"loss", gauge(a, "train_loss").value_or(0)},
                          {"accuracy", gauge(a, "train_accuracy").value_or(0)},
                          {"samples_per_second", gauge(a, "train_samples_per_second").value_or(0)},
                          {"epochs_done", gauge(a, "train_epochs_done").value_or(0)},
                          {"test_accuracy", gauge(a, "train_test_accuracy") ? json(*gauge(a, "train_test_accuracy"))
                                                                            : json(nullptr)}});
    }
    for (auto& v : all) {
      if (!v.up) continue;
      for (auto& w : v.state.value("waits", json::array()))
        if (mentions(str(w, "what"), "clock") || mentions(str(w, "on"), "clock")) {
          json x = w;
          x["node"] = v.name;
          clock_waits.push_back(x);
        }
    }
    const std::string strategy = str(e, "strategy");
    const bool ps_like = strategy == "ps" || strategy == "ralp" || strategy == "hetpipe";
    std::string missing;
    if (ps_like && ps_workers.empty() && ps_servers.empty())
      missing = "no ps clock gauges yet (no worker has pushed); the open waits that name a clock:";
    outcome o;
    if (as_json) {
      json j = {{"job", str(e, "job")},       {"strategy", strategy},     {"training", training},
                {"ps_workers", ps_workers},    {"ps_servers", ps_servers}, {"clock_waits", clock_waits}};
      j["missing"] = missing.empty() ? json(nullptr) : json(missing);
      o.out = j.dump(2) + "\n";
      return o;
    }
    if (training.empty() && ps_servers.empty() && ps_workers.empty()) {
      appendf(o.out, "no actor of job '%s'%s reports training progress (no train_* gauges)\n", str(e, "job").c_str(),
              strategy.empty() ? "" : (" (strategy " + strategy + ")").c_str());
    } else if (!training.empty()) {
      appendf(o.out, "%-16s %-10s %6s %11s %9s %9s %11s %7s %9s\n", "ACTOR", "NODE", "EPOCH", "STEP", "LOSS",
              "ACCURACY", "SAMPLES/S", "DONE", "TEST ACC");
      for (auto& t : training) {
        std::string step = number(num(t, "step")) + "/" + number(num(t, "steps_per_epoch"));
        std::string test = t["test_accuracy"].is_number() ? number(t["test_accuracy"].get<double>()) : "-";
        appendf(o.out, "%-16s %-10s %6s %11s %9.4f %9.4f %11.0f %7s %9s\n", str(t, "actor").c_str(),
                str(t, "node").c_str(), number(num(t, "epoch")).c_str(), step.c_str(), num(t, "loss"),
                num(t, "accuracy"), num(t, "samples_per_second"), number(num(t, "epochs_done")).c_str(),
                test.c_str());
      }
    }
    if (!ps_servers.empty()) {
      appendf(o.out, "%-16s %-10s %12s %9s %9s %7s %10s\n", "PS SERVER", "NODE", "GLOBAL CLOCK", "SLOWEST", "FASTEST",
              "SPREAD", "BOUND");
      for (auto& v : ps_servers) {
        const double bound = num(v, "staleness_bound");
        appendf(o.out, "%-16s %-10s %12s %9s %9s %7s %10s\n", str(v, "actor").c_str(), str(v, "node").c_str(),
                number(num(v, "global_clock")).c_str(), number(num(v, "slowest_clock")).c_str(),
                number(num(v, "fastest_clock")).c_str(), number(num(v, "spread")).c_str(),
                bound < 0 ? "none (asp)" : number(bound).c_str());
      }
    }
    if (!ps_workers.empty()) {
      // HetPipe stages also say how many minibatches they hold.
      bool stages = false;
      for (auto& v : ps_workers) stages = stages || v.contains("in_flight");
      if (stages)
        appendf(o.out, "%-16s %-10s %12s %10s\n", "WORKER", "NODE", "LOCAL CLOCK", "IN FLIGHT");
      else
        appendf(o.out, "%-16s %-10s %12s\n", "WORKER", "NODE", "LOCAL CLOCK");
      for (auto& v : ps_workers) {
        if (stages)
          appendf(o.out, "%-16s %-10s %12s %10s\n", str(v, "actor").c_str(), str(v, "node").c_str(),
                  number(num(v, "clock")).c_str(),
                  v.contains("in_flight") ? number(num(v, "in_flight")).c_str() : "-");
        else
          appendf(o.out, "%-16s %-10s %12s\n", str(v, "actor").c_str(), str(v, "node").c_str(),
                  number(num(v, "clock")).c_str());
      }
    }
    if (ps_like && (!ps_servers.empty() || !ps_workers.empty()) && !clock_waits.empty()) {
      appendf(o.out, "open waits that name a clock:\n");
      for (auto& w : clock_waits) appendf(o.out, "  %-10s %s\n", str(w, "node").c_str(), wait_text(w).c_str());
    }
    if (!missing.empty()) {
      appendf(o.out, "%s\n", missing.c_str());
      if (clock_waits.empty()) appendf(o.out, "  (no open wait names a clock right now)\n");
      for (auto& w : clock_waits) appendf(o.out, "  %-10s %s\n", str(w, "node").c_str(), wait_text(w).c_str());
    }
    o.err = unreachable_note(all);
    return o;
  }

  outcome plan(const json& e, const std::vector<std::string>&, bool as_json) {
    const json placement = e.value("placement", json::array());
    const std::string strategy = str(e, "strategy");
    outcome o;
    if (as_json) {
      json j = {{"cluster", str(e, "cluster")}, {"job", str(e, "job")}, {"strategy", strategy}, {"actors", json::array()}};
      for (auto& p : placement)
        j["actors"].push_back({{"name", str(p, "name")}, {"type", str(p, "type")}, {"node", str(p, "node")}});
      o.out = j.dump(2) + "\n";
      return o;
    }
    // As `hetflow plan` prints the placement.
    appendf(o.out, "plan of the running job: cluster '%s', job '%s'%s\n", str(e, "cluster").c_str(),
            str(e, "job").c_str(), strategy.empty() ? "" : (" (strategy " + strategy + ")").c_str());
    appendf(o.out, "actors (%zu):\n", placement.size());
    for (auto& p : placement)
      appendf(o.out, "  %-24s %-16s on node %s\n", str(p, "name").c_str(), str(p, "type").c_str(),
              str(p, "node").c_str());
    return o;
  }

  // kill, pause, resume: one request to the node the actor runs on.
  outcome to_actor_node(const json& e, const std::string& what, const std::string& actor, bool as_json) {
    outcome fail;
    auto p = find_actor(e, actor, fail);
    if (!p) return fail;
    const std::string node = str(*p, "node");
    std::string host;
    int port = 0;
    for (auto& n : e.value("nodes", json::array()))
      if (str(n, "name") == node) {
        host = str(n, "host");
        port = int(num(n, "port"));
      }
    auto r = what == "kill" ? client_.kill(host, port, actor) : client_.pause(host, port, actor, what == "pause");
    if (!r) return failure(3, "hetflow shell: " + what + " " + actor + ": " + r.error().message());
    outcome o;
    o.rc = r->ok ? 0 : 1;
    if (as_json) {
      o.out = json{{"actor", actor}, {"node", node}, {"ok", r->ok}, {"message", r->body}}.dump(2) + "\n";
      if (!r->ok) o.err = what + " " + actor + ": " + r->body + "\n";
    } else if (r->ok) {
      o.out = r->body + "\n";
    } else {
      o.err = what + " " + actor + ": " + r->body + "\n";
    }
    return o;
  }
  // `set staleness D`: every node that is up; ok when some node's HetPipe
  // shards took it.
  outcome set_value(const json& e, const std::vector<std::string>& args, bool as_json) {
    char* end = nullptr;
    const long long d = std::strtoll(args[1].c_str(), &end, 10);
    if (args[0] != "staleness" || end == args[1].c_str() || *end != '\0' || d < 0)
      return failure(1, "usage: set staleness D (D an integer >= 0)");
    outcome o;
    json answers = json::array();
    bool any = false;
    for (auto& n : e.value("nodes", json::array())) {
      auto r = client_.set_staleness(str(n, "host"), int(num(n, "port")), d);
      const bool ok = r && r->ok;
      const std::string text = r ? r->body : r.error().message();
      any = any || ok;
      answers.push_back({{"node", str(n, "name")}, {"ok", ok}, {"message", text}});
      if (!as_json) appendf(ok ? o.out : o.err, "%s\n", text.c_str());
    }
    o.rc = any ? 0 : 1;
    if (as_json) o.out = json{{"staleness", d}, {"ok", any}, {"nodes", answers}}.dump(2) + "\n";
    return o;
  }

  // `checkpoint`: strategy ps: every node's PS shards take one more
  // checkpoint at one clock L = the fastest worker's clock + 2 (+ 3 per
  // retry), each written when the global clock reaches L, so that the cut is
  // the same on every shard. A shard that has applied a push past L already
  // refuses; then the shell asks again a little further ahead (3 tries).
  // Strategy ralp: the same with its one server. Strategy hetpipe: the
  // shards (hp_ps) cut at wave L and every stage (hp_stage) writes its
  // optimizer state before it pulls wave L. Strategies single and dp: the
  // trainer (every replica) saves after its current step (the replicas
  // agree through the step's sum), so L is not used.
  outcome checkpoint(const json& e, const std::vector<std::string>&, bool as_json) {
    const std::string strategy = str(e, "strategy");
    std::set<std::string> server_types;
    if (strategy == "ralp") server_types = {"ralp_server"};
    else if (strategy == "hetpipe") server_types = {"hp_ps", "hp_stage"};
    else if (strategy == "dp") server_types = {"dp_replica"};
    else if (strategy == "single" || strategy.empty()) server_types = {"trainer"};
    else server_types = {"ps_shard"};
    const bool steps = server_types.count("trainer") || server_types.count("dp_replica");
    if (!steps && strategy != "ps" && strategy != "ralp" && strategy != "hetpipe")
      return failure(1, "checkpoint: strategy \"" + strategy + "\" has no checkpoints");
    outcome o;
    json tries = json::array();
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto all = everyone(e);
      int64_t fastest = 0;
      for (auto& r : actor_rows(e, all)) {
        if (auto f = gauge(r.actor, "ps_fastest_clock")) fastest = std::max(fastest, int64_t(*f));
        if (auto c = gauge(r.actor, "ps_clock")) fastest = std::max(fastest, int64_t(*c));
      }
      // single, dp: the label is the request's id (each replica takes one
      // id once); hetpipe: stage 0 has often asked for the next wave's
      // weights already, so one wave further.
      const int64_t label =
          steps ? 1 + int64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count() %
                              ((int64_t{1} << 24) - 1))
                : fastest + (strategy == "hetpipe" ? 3 : 2) + 3 * attempt;
      json answers = json::array();
      bool all_ok = true, any = false;
      std::string text;
      std::set<std::string> shard_nodes;  // the nodes the placement puts PS shards on
      for (auto& p : e.value("placement", json::array()))
        if (server_types.count(str(p, "type"))) shard_nodes.insert(str(p, "node"));
      // Every node asked at once (the label is only a few clocks ahead).
      std::vector<std::pair<std::string, int>> addrs;
      std::vector<std::string> names;
      for (auto& n : e.value("nodes", json::array())) {
        if (!shard_nodes.count(str(n, "name"))) continue;
        addrs.emplace_back(str(n, "host"), int(num(n, "port")));
        names.push_back(str(n, "name"));
      }
      auto results = client_.checkpoint_all(addrs, label);
      for (std::size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        const std::string body = r ? r->body : r.error().message();
        any = true;
        all_ok = all_ok && r && r->ok;
        answers.push_back({{"node", names[i]}, {"ok", r && r->ok}, {"message", body}});
        text += body + "\n";
      }
      tries.push_back({{"label", label}, {"ok", any && all_ok}, {"nodes", answers}});
      if (!any) return failure(1, "checkpoint: the job places no " + *server_types.begin());
      if (all_ok) {
        o.rc = 0;
        if (as_json) {
          // ralp: the clock the server took (it may be later than asked; its
          // answer says "checkpoint at clock N"); single and dp: no clock (null).
          json taken = label;
          if (steps) {
            taken = nullptr;
          } else if (strategy == "ralp") {
            const auto at = text.find("checkpoint at clock ");
            if (at != std::string::npos) taken = std::strtoll(text.c_str() + at + 20, nullptr, 10);
          }
          o.out = json{{"checkpoint", taken}, {"ok", true}, {"tries", tries}}.dump(2) + "\n";
        } else {
          // ralp: the server may take a later clock than asked; its answer says which.
          o.out = steps                   ? "checkpoint after the current step on every " +
                                                (strategy == "dp" ? std::string("replica") : "trainer") + ":\n" + text
                  : strategy == "ralp"    ? "checkpoint on the RALP server:\n" + text
                  : strategy == "hetpipe" ? "checkpoint at wave " + std::to_string(label) +
                                                " on every HetPipe shard and stage:\n" + text
                                          : "checkpoint at clock " + std::to_string(label) + " on every PS shard:\n" + text;
        }
        return o;
      }
      if (steps) {  // no clock to move on to: the refusal stands
        if (!as_json) o.err += "checkpoint refused:\n" + text;
        o.rc = 1;
        if (as_json) o.out = json{{"ok", false}, {"tries", tries}}.dump(2) + "\n";
        return o;
      }
      if (!as_json) o.err += "checkpoint at clock " + std::to_string(label) + " refused:\n" + text;
    }
    o.rc = 1;
    if (as_json) o.out = json{{"ok", false}, {"tries", tries}}.dump(2) + "\n";
    else o.err += "checkpoint: no clock every shard could cut at in 3 tries (workers racing ahead; asp?)\n";
    return o;
  }

  outcome kill_actor(const json& e, const std::vector<std::string>& args, bool as_json) {
    return to_actor_node(e, "kill", args[0], as_json);
  }
  outcome pause_actor(const json& e, const std::vector<std::string>& args, bool as_json) {
    return to_actor_node(e, "pause", args[0], as_json);
  }
  outcome resume_actor(const json& e, const std::vector<std::string>& args, bool as_json) {
    return to_actor_node(e, "resume", args[0], as_json);
  }

  struct sample {
    std::chrono::steady_clock::time_point at;
    double sent = 0, received = 0, messages = 0;
  };
  std::map<std::string, sample> rates_;  // top: the previous data-plane counters per node
  actors::shell_client& client_;
  std::string host_;
  int port_;
  json last_entry_ = json::object();
};

void print(const outcome& o) {
  std::fputs(o.out.c_str(), stdout);
  std::fflush(stdout);
  std::fputs(o.err.c_str(), stderr);
  std::fflush(stderr);
}

// ---- interactive mode ------------------------------------------------------------

session* active = nullptr;           // for the completer (readline's API is global)
std::vector<std::string> candidates;  // of the completion in progress

char* next_candidate(const char* text, int state) {
  static std::size_t i = 0;
  if (state == 0) i = 0;
  const std::size_t n = std::strlen(text);
  while (i < candidates.size()) {
    const std::string& c = candidates[i++];
    if (c.compare(0, n, text) == 0) return strdup(c.c_str());
  }
  return nullptr;
}

// Command names first; actor names after stat and kill; node names after actors.
char** complete(const char* text, int start, int) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  std::istringstream before(std::string(rl_line_buffer, static_cast<std::size_t>(std::max(0, start))));
  std::vector<std::string> words;
  for (std::string t; before >> t;) words.push_back(t);
  candidates.clear();
  if (words.empty())
    candidates = command_names;
  else if (words.size() == 1 && active &&
           (words[0] == "stat" || words[0] == "kill" || words[0] == "pause" || words[0] == "resume"))
    candidates = active->actor_names();
  else if (words.size() == 1 && active && words[0] == "actors")
    candidates = active->node_names();
  return rl_completion_matches(text, next_candidate);
}

// `top`: actors and waits every second until a key (or Ctrl-C: the terminal
// is raw meanwhile, so it is a key too).
void top(session& s) {
  termios saved{};
  const bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
  if (!tty) {
    print(failure(1, "top needs a terminal"));
    return;
  }
  termios raw = saved;
  raw.c_lflag &= ~(ICANON | ECHO | ISIG);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  for (;;) {
    outcome o = s.overview();
    std::string screen = "\033[H\033[2J";
    appendf(screen, "hetflow top: cluster '%s', node '%s' - every 1 s; any key (or Ctrl-C) stops\n\n",
            str(s.last_entry(), "cluster").c_str(), str(s.last_entry(), "node").c_str());
    screen += o.out + o.err;
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
    if (o.rc == 3) break;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0) {
      char c;
      (void)!::read(STDIN_FILENO, &c, 1);
      break;
    }
  }
  tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  std::fputs("\n", stdout);
}

int interactive(session& s, const std::string& where) {
  auto e = s.entry();
  if (!e) {
    print(failure(3, "hetflow shell: " + e.error().message()));
    return 3;
  }
  std::printf("connected to node '%s' (%s) of cluster '%s': job '%s', %zu nodes, %zu actors\n"
              "help lists the commands; Tab completes commands and actor names; quit or Ctrl-D leaves\n",
              str(*e, "node").c_str(), where.c_str(), str(*e, "cluster").c_str(), str(*e, "job").c_str(),
              e->value("nodes", json::array()).size(), e->value("placement", json::array()).size());
  std::fflush(stdout);
  active = &s;
  rl_readline_name = "hetflow";
  rl_attempted_completion_function = complete;
  using_history();
  std::string history;
  if (const char* h = std::getenv("HETFLOW_SHELL_HISTORY"))
    history = h;
  else if (const char* home = std::getenv("HOME"))
    history = std::string(home) + "/.hetflow_shell_history";
  if (!history.empty()) read_history(history.c_str());
  stifle_history(1000);
  const std::string prompt = "hetflow " + str(*e, "node") + "> ";
  for (;;) {
    char* raw = readline(prompt.c_str());
    if (raw == nullptr) {
      std::fputs("\n", stdout);
      break;
    }
    std::string line(raw);
    std::free(raw);
    const auto b = line.find_first_not_of(" \t"), t = line.find_last_not_of(" \t\r\n");
    if (b == std::string::npos) continue;
    line = line.substr(b, t - b + 1);
    add_history(line.c_str());
    if (line == "quit" || line == "exit") break;
    if (line == "top") {
      top(s);
      continue;
    }
    print(s.run(line, false));
  }
  if (!history.empty()) write_history(history.c_str());
  active = nullptr;
  return 0;
}

}  // namespace

int shell_command(const std::vector<std::string>& args, actors::registry& reg) {
  std::string address, topology_file, command;
  bool have_command = false, as_json = false;
  double timeout_s = 5.0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> const std::string* {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "hetflow shell: %s needs a value\n%s", flag, usage);
        return nullptr;
      }
      return &args[++i];
    };
    if (a == "--topology") {
      auto v = value("--topology");
      if (!v) return 2;
      topology_file = *v;
    } else if (a == "-c") {
      auto v = value("-c");
      if (!v) return 2;
      command = *v;
      have_command = true;
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "--timeout") {
      auto v = value("--timeout");
      if (!v) return 2;
      char* end = nullptr;
      timeout_s = std::strtod(v->c_str(), &end);
      if (end == v->c_str() || *end != '\0' || !(timeout_s > 0) || timeout_s > 3600) {
        std::fprintf(stderr, "hetflow shell: --timeout wants seconds in (0, 3600], got '%s'\n", v->c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "hetflow shell: unknown option '%s'\n%s", a.c_str(), usage);
      return 2;
    } else if (address.empty()) {
      address = a;
    } else {
      std::fprintf(stderr, "hetflow shell: unexpected argument '%s' (quote a -c command)\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (address.empty()) {
    std::fprintf(stderr, "hetflow shell: missing HOST:PORT\n%s", usage);
    return 2;
  }
  if (as_json && !have_command) {
    std::fprintf(stderr, "hetflow shell: --json goes with -c COMMAND\n%s", usage);
    return 2;
  }
  const auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? std::string() : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  {
    const std::string p = colon == std::string::npos ? std::string() : address.substr(colon + 1);
    char* end = nullptr;
    long v = p.empty() ? 0 : std::strtol(p.c_str(), &end, 10);
    if (host.empty() || p.empty() || *end != '\0' || v < 1 || v > 65535) {
      std::fprintf(stderr, "hetflow shell: '%s' is not HOST:PORT (e.g. 127.0.0.1:7100)\n%s", address.c_str(), usage);
      return 2;
    }
    port = int(v);
  }

  actors::shell_client_options co;
  co.timeout_s = timeout_s;
  {
    char hn[256] = "localhost";
    gethostname(hn, sizeof hn - 1);
    co.name = "shell@" + std::string(hn) + ":" + std::to_string(::getpid());
  }
  // The secret: the topology's [cluster] secret_file / secret_env, else
  // HETFLOW_SECRET_FILE; none: a node with a secret refuses us.
  if (!topology_file.empty()) {
    auto pl = actors::load_plugins(topology_file, reg);
    for (auto& d : pl.errors) std::fprintf(stderr, "%s\n", topology::format(d).c_str());
    if (!pl.ok()) return 2;
    auto r = topology::load_topology(topology_file, reg.catalog());
    for (auto& d : r.errors) std::fprintf(stderr, "%s\n", topology::format(d).c_str());
    if (!r.ok()) return 2;
    auto secret = actors::load_cluster_secret(r.model->runtime);
    if (!secret) {
      std::fprintf(stderr, "hetflow shell: %s: %s\n", topology_file.c_str(), secret.error().message().c_str());
      return 2;
    }
    co.secret = *secret;
    co.heartbeat_s = r.model->runtime.heartbeat_interval_s;
  } else if (const char* f = std::getenv("HETFLOW_SECRET_FILE"); f != nullptr && *f != '\0') {
    topology::runtime_settings rt;
    rt.secret_file = f;
    auto secret = actors::load_cluster_secret(rt);
    if (!secret) {
      std::fprintf(stderr, "hetflow shell: HETFLOW_SECRET_FILE: %s\n", secret.error().message().c_str());
      return 2;
    }
    co.secret = *secret;
  }

  int rc = 0;
  {
    actors::shell_client client(co);
    session s(client, host, port);
    if (have_command) {
      outcome o = s.run(command, as_json);
      print(o);
      rc = o.rc;
    } else {
      rc = interactive(s, host + ":" + std::to_string(port));
    }
    // Leave without tearing the connections down in order: the nodes do not
    // care, and a node that stopped answering must not hold up our exit.
    std::fflush(nullptr);
    std::_Exit(rc);
  }
}

}  // namespace hetflow::apps
