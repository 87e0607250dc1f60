#include "actors/shell_service.hpp"

#include <caf/all.hpp>

#include <cstdlib>
#include <map>

#include "actors/json.hpp"
#include "actors/metrics.hpp"
#include "kernels/waits.hpp"

namespace hetflow::actors {

std::vector<metric_sample> parse_metric_samples(const std::string& text) {
  std::vector<metric_sample> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    metric_sample s;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (s.name.empty()) continue;
    bool bad = false;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          bad = true;
          break;
        }
        std::string key(line.substr(i, eq - i)), value;
        std::size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) {
          bad = true;
          break;
        }
        s.labels.emplace_back(std::move(key), std::move(value));
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (bad || i >= line.size()) continue;
      ++i;  // '}'
    }
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) continue;
    const std::string value(line.substr(i));
    char* end = nullptr;
    s.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    out.push_back(std::move(s));
  }
  return out;
}

std::string state_json(const shell_node_snapshot& s, const std::string& metrics_text) {
  // Per actor: its gauges (labels other than actor/type go into the key).
  struct actor_gauges {
    std::map<std::string, double> values;
    int running = -1, ok = -1;  // -1: no sample
  };
  std::map<std::string, actor_gauges> by_actor;
  for (auto& m : parse_metric_samples(metrics_text)) {
    std::string actor, rest;
    for (auto& [k, v] : m.labels) {
      if (k == "actor")
        actor = v;
      else if (k != "type")
        rest += (rest.empty() ? "" : ",") + k + "=" + v;
    }
    // Open waits come from kernels/waits directly (the metrics copy is only
    // refreshed when /metrics is scraped).
    if (actor.empty() || m.name == "hetflow_wait_seconds") continue;
    auto& g = by_actor[actor];
    if (m.name == "hetflow_actor_running") {
      g.running = m.value != 0 ? 1 : 0;
      continue;
    }
    if (m.name == "hetflow_actor_ok") {
      g.ok = m.value != 0 ? 1 : 0;
      continue;
    }
    std::string key = m.name.rfind("hetflow_", 0) == 0 ? m.name.substr(8) : m.name;
    if (!rest.empty()) key += "{" + rest + "}";
    g.values[key] = m.value;
  }

  json_writer w;
  w.begin_object();
  w.field("cluster", s.cluster).field("job", s.job).field("strategy", s.strategy);
  w.field("node", s.node).field("index", s.index).field("host", s.host).field("port", s.port);
  w.field("data_plane", s.data_plane).field("uptime_s", s.uptime_s).field("rss_bytes", s.rss_bytes);
  w.field("job_running", s.job_running).field("progress_total", kernels::waits::progress_count());
  w.key("data_plane_stats").begin_object();
  w.field("messages_sent", s.messages_sent).field("bytes_sent", s.bytes_sent);
  w.field("messages_received", s.messages_received).field("bytes_received", s.bytes_received);
  w.end_object();
  w.key("nodes").begin_array();
  for (auto& n : s.nodes) w.begin_object().field("name", n.name).field("host", n.host).field("port", n.port).end_object();
  w.end_array();
  w.key("placement").begin_array();
  for (auto& a : s.actors) w.begin_object().field("name", a.name).field("type", a.type).field("node", a.node).end_object();
  w.end_array();
  w.key("actors").begin_array();
  for (auto& a : s.actors) {
    if (a.node != s.node) continue;
    auto it = by_actor.find(a.name);
    const actor_gauges none;
    const actor_gauges& g = it == by_actor.end() ? none : it->second;
    const char* state = g.running == 1 ? "running"
                        : g.ok == 1    ? "finished"
                        : g.ok == 0    ? "failed"
                        : g.running == 0 ? "stopped"
                                         : "not started";
    w.begin_object().field("name", a.name).field("type", a.type).field("node", a.node).field("state", state);
    // CAF 0.17's mailbox size is not safe to read from outside the actor:
    // the wire messages delivered and not yet let go by it stand in (null
    // before its first one).
    w.key("mailbox");
    if (auto p = g.values.find("actor_wire_pending_messages"); p != g.values.end())
      w.value(int64_t(p->second));
    else
      w.null();
    w.key("gauges").begin_object();
    for (auto& [k, v] : g.values) w.field(k, v);
    w.end_object().end_object();
  }
  w.end_array();
  w.key("waits").begin_array();
  for (auto& e : kernels::waits::snapshot())
    w.begin_object().field("actor", e.actor).field("on", e.on).field("what", e.what).field("seconds", e.seconds).end_object();
  w.end_array();
  w.end_object();
  return w.str();
}

caf::behavior shell_service(caf::event_based_actor* self, std::function<shell_node_snapshot()> snapshot,
                            caf::actor node) {
  self->monitor(node);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  // Anything else from a shell: an error reply, not CAF's default (which
  // would print to the terminal).
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::sec::unexpected_message;
  });
  return {
      [snapshot](shreq_atom, const std::string& cmd, const std::string&) -> caf::message {
        if (cmd == "state") {
          auto snap = snapshot();  // first: it also publishes the node's per-actor counters
          return caf::make_message(shreq_atom::value, true, state_json(snap, metrics::render({})));
        }
        return caf::make_message(shreq_atom::value, false,
                                 "this node does not know the shell request '" + cmd.substr(0, 64) +
                                     "' (a newer hetflow shell than node?)");
      },
      [self, node](shkill_atom a, const std::string& actor) { return self->delegate(node, a, actor); },
      [self, node](shpause_atom a, const std::string& actor, bool pause) {
        return self->delegate(node, a, actor, pause);
      },
      [self, node](shstale_atom a, int64_t d) { return self->delegate(node, a, d); },
      [self, node](shckpt_atom a, int64_t label) { return self->delegate(node, a, label); },
  };
}

}  // namespace hetflow::actors
