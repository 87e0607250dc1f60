#include "actors/builtin/stream_job.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "actors/builtin/stream_protocol.hpp"
#include "actors/json.hpp"
#include "actors/ps/ps_options.hpp"
#include "topology/data_parallel.hpp"

namespace hetflow::actors::builtin {

expected<stream_options> stream_options_of(const topology::cluster& c) {
  const auto& p = c.job.params;
  stream_options o;
  const bool ps = p.get_string("strategy", "single") == "ps";
  std::vector<std::string> worker_nodes;  // ps: worker w's node
  if (ps) {
    HF_ASSIGN_OR_RETURN(auto replicas, topology::dp_replicas(c, p.get_strings("ps_workers")));
    o.consumers.clear();
    for (std::size_t w = 0; w < replicas.size(); ++w) {
      o.consumers.push_back(ps_job::worker_name(int(w)));
      worker_nodes.push_back(replicas[w].node);
    }
  }
  std::vector<std::string> nodes = p.get_strings("preprocess_nodes");
  for (const auto& n : nodes)
    if (c.find_node(n) == nullptr)
      return make_error(errc::not_found, "[job] preprocess_nodes names node '" + n +
                                             "', which is not in the topology's [[nodes]]");
  int64_t shards = p.get_int("preprocess_shards", 0);
  if (p.get_string("strategy", "single") == "hetpipe") {
    o.consumers.clear();
    o.consumers_from_head = true;
  }
  if (ps) {
    // One shard per worker by default, next to it: its batches then never
    // cross a link. More shards than workers deal each worker's steps out
    // among that worker's shards (stream_job.hpp).
    if (shards <= 0) shards = int64_t(o.consumers.size());
    if (shards < int64_t(o.consumers.size()))
      return make_error(errc::invalid_argument,
                        "[job] strategy = \"ps\" with input = \"stream\": preprocess_shards = " +
                            std::to_string(shards) + " is fewer than the " + std::to_string(o.consumers.size()) +
                            " ps workers; each worker needs a shard of its own (shard k feeds worker k mod " +
                            std::to_string(o.consumers.size()) + "): set preprocess_shards >= " +
                            std::to_string(o.consumers.size()) + ", or 0 for one per worker");
    if (nodes.empty()) nodes = worker_nodes;
  } else {
    if (nodes.empty())
      for (const auto& n : c.nodes) nodes.push_back(n.name);
    if (shards <= 0) shards = int64_t(nodes.size());
  }
  // Round robin over the nodes: one per node by default, more wrap around
  // (ps with no preprocess_nodes: shard k on worker k mod W's node).
  for (int64_t k = 0; k < shards; ++k) o.shard_nodes.push_back(nodes[std::size_t(k) % nodes.size()]);
  o.prefetch = std::max<int64_t>(1, p.get_int("prefetch", 4));
  o.parallelism = static_cast<int>(p.get_int("preprocess_parallelism", 0));
  if (p.get_bool("augment", false)) {
    o.augment.crop_padding = int(p.get_int("crop_padding", 2));
    o.augment.flip = p.get_bool("flip", true);
  }
  o.timeout_s = p.get_number("stream_timeout", 60.0);
  o.fault = p.get_string("stream_fault", "");
  o.epochs = int(std::max<int64_t>(1, p.get_int("epochs", 3)));  // train.cpp's default
  o.failover = p.get_bool("stream_failover", true);
  return o;
}

status check_stream_shards(int64_t shards, int64_t consumers, const std::string& who) {
  if (shards >= consumers) return {};
  return make_error(errc::invalid_argument,
                    "[job] input = \"stream\": " + std::to_string(shards) + " stream shard(s) for " +
                        std::to_string(consumers) + " " + who + "; each needs a shard of its own (shard k feeds " +
                        "consumer k mod " + std::to_string(consumers) + "): set preprocess_shards >= " +
                        std::to_string(consumers));
}

void add_stream_shard_actors(std::vector<topology::actor_spec>& v, const stream_options& o) {
  for (int k = 0; k < o.shards(); ++k) {
    topology::actor_spec a;
    a.name = stream::shard_name(k);
    a.type = "stream_shard";
    a.node = o.shard_nodes[std::size_t(k)];
    a.args.set("shard", int64_t{k});
    v.push_back(std::move(a));
  }
}

void write_stream_report(json_writer& w, const stream_options& opts, const std::vector<int>& shards,
                         const stream_stats& stats, int epochs) {
  w.field("input", "stream");
  w.key("stream").begin_object();
  w.field("shards", int64_t(shards.size())).field("prefetch", opts.prefetch);
  w.key("shard_nodes").begin_array();
  for (int k : shards) w.value(opts.shard_nodes[std::size_t(k)]);
  w.end_array();
  w.field("augment", opts.augment.enabled());
  w.field("batches", stats.batches).field("max_buffered", stats.max_buffered);
  w.field("wait_seconds", stats.wait_seconds);
  if (!stats.input_json.empty()) w.key(stats.input_key).raw(stats.input_json);
  w.field("exactly_once", stats.epochs.size() == std::size_t(epochs));
  w.field("failover", opts.failover);
  w.key("takeovers").begin_array();
  for (const auto& t : stats.takeovers) {
    w.begin_object().field("shard", int64_t{t.shard}).field("node", t.node).field("taken_over_by", int64_t{t.taker});
    w.field("epoch", int64_t{t.epoch}).field("step", t.step).field("at_s", t.at_s).end_object();
  }
  w.end_array();
  w.field("dropped_late", stats.dropped_late);
  w.key("epochs").begin_array();
  for (const auto& e : stats.epochs) {
    char hex[20];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(e.checksum));
    w.begin_object().field("epoch", int64_t{e.epoch}).field("rows", e.rows).field("id_checksum", hex);
    w.end_object();
  }
  w.end_array().end_object();
}

bool stream_books_sum::add(const std::string& m) {
  auto at = m.find("\"stream\":{");
  if (at == std::string::npos) return false;
  auto once = m.find("\"exactly_once\":", at);
  auto list = m.find("\"epochs\":[", at);
  if (once == std::string::npos || list == std::string::npos) return false;
  std::vector<int64_t> rows;
  std::vector<uint64_t> sums;
  const char* p = m.c_str() + list + 10;
  int epoch = 0, used = 0;
  long long r = 0;
  char hex[17] = {};
  while (std::sscanf(p, "{\"epoch\":%d,\"rows\":%lld,\"id_checksum\":\"%16[0-9a-f]\"}%n", &epoch, &r, hex, &used) ==
             3 &&
         used > 0) {
    rows.push_back(r);
    sums.push_back(std::strtoull(hex, nullptr, 16));
    p += used;
    if (*p != ',') break;
    ++p;
    used = 0;
  }
  if (any_ && rows.size() != rows_.size()) once_ = false;
  any_ = true;
  once_ = once_ && m.compare(once + 15, 4, "true") == 0;
  rows_.resize(std::max(rows_.size(), rows.size()), 0);
  sums_.resize(rows_.size(), 0);
  for (std::size_t e = 0; e < rows.size(); ++e) {
    rows_[e] += rows[e];
    sums_[e] += sums[e];
  }
  return true;
}

std::string stream_books_sum::json() const {
  std::string s = "\"stream\":{\"exactly_once\":" + std::string(once_ ? "true" : "false") + ",\"epochs\":[";
  for (std::size_t e = 0; e < rows_.size(); ++e) {
    char hex[20];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(sums_[e]));
    s += (e ? ",{" : "{") + std::string("\"epoch\":") + std::to_string(e + 1) + ",\"rows\":" +
         std::to_string(rows_[e]) + ",\"id_checksum\":\"" + hex + "\"}";
  }
  return s + "]}";
}

}  // namespace hetflow::actors::builtin
