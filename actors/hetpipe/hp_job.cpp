// The train job's strategy "hetpipe": expansion into hp_head, hp_stage and
// hp_ps actors, role encoding, and the report's "hetpipe" member (hp_job.hpp).
#include "actors/hetpipe/hp_job.hpp"

#include <sstream>

#include "actors/builtin/stream_job.hpp"
#include "actors/registry.hpp"

namespace hetflow::actors::hp_job {

std::string encode_role(const std::map<std::string, std::string>& kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += k + "=" + v + "\n";
  return s;
}

std::map<std::string, std::string> decode_role(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> v;
  std::istringstream in(s);
  std::string tok;
  while (std::getline(in, tok, ','))
    if (!tok.empty()) v.push_back(std::stoll(tok));
  return v;
}

int64_t vw_minibatches(int64_t steps_per_epoch, int epochs, int v, int V) {
  if (V <= 0 || v >= V) return 0;
  const int64_t per_epoch = steps_per_epoch > v ? (steps_per_epoch - v + V - 1) / V : 0;
  return per_epoch * epochs;
}

expected<std::vector<topology::actor_spec>> expand(const topology::cluster& c) {
  const auto& p = c.job.params;
  const std::string input = p.get_string("input", "memory");
  if (input != "memory" && input != "stream")
    return make_error(errc::invalid_argument, "[job] input = \"" + input + "\": \"memory\" or \"stream\"");
  if (p.get_string("model", "lenet5") == "dlrm")
    return make_error(errc::unsupported, "[job] strategy = \"hetpipe\" cannot train dlrm yet (sparse embedding "
                                         "updates); use strategy = \"single\" or \"ps\"");
  if (!c.actors.empty())
    return make_error(errc::invalid_argument, "[job] strategy = \"hetpipe\" places its own actors (hphead, "
                                              "hpstage*, hpps*); remove the [[actors]] tables");
  std::vector<topology::actor_spec> v;
  topology::actor_spec h;
  h.name = head_name;
  h.type = "hp_head";
  h.node = c.nodes[0].name;
  v.push_back(std::move(h));
  int k = 0;
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    for (std::size_t d = 0; d < c.nodes[n].devices.size(); ++d) {
      topology::actor_spec s;
      s.name = stage_name(k++);
      s.type = "hp_stage";
      s.node = c.nodes[n].name;
      s.args.set("device", int64_t(d));
      v.push_back(std::move(s));
    }
    topology::actor_spec s;
    s.name = ps_name(int(n));
    s.type = "hp_ps";
    s.node = c.nodes[n].name;
    v.push_back(std::move(s));
  }
  if (k == 0)
    return make_error(errc::invalid_argument, "[job] strategy = \"hetpipe\": no node lists a device");
  // input = "stream": the pre-processing shards feed each VW's stage 0; the
  // head names who consumes once it has planned (stream_job.hpp).
  if (input == "stream") {
    HF_ASSIGN_OR_RETURN(builtin::stream_options so, builtin::stream_options_of(c));
    // A VW count set in the file is known now (else the head checks once it
    // has planned).
    HF_RETURN_IF_ERROR(builtin::check_stream_shards(so.shards(), p.get_int("virtual_workers", 0), "virtual workers"));
    builtin::add_stream_shard_actors(v, so);
  }
  return v;
}

void add_types(registry& reg) {
  add_hp_head(reg);
  add_hp_stage(reg);
  add_hp_ps(reg);
}

std::string summarize(const std::vector<actor_result>& results) {
  std::string stages, shards;
  builtin::stream_books_sum books;  // input = "stream": every VW's stage 0's, added up
  for (auto& r : results) {
    const bool stage = r.name.rfind("hpstage", 0) == 0, shard = r.name.rfind("hpps", 0) == 0;
    if ((!stage && !shard) || r.metrics_json.size() <= 2) continue;
    if (stage) books.add(r.metrics_json);
    std::string entry = "{\"name\":\"" + r.name + "\",\"node\":\"" + r.node + "\"," +
                        r.metrics_json.substr(1, r.metrics_json.size() - 2) + "}";
    std::string& to = stage ? stages : shards;
    to += (to.empty() ? "" : ",") + entry;
  }
  if (stages.empty() && shards.empty()) return {};
  return ",\"hetpipe\":{\"stages\":[" + stages + "],\"shards\":[" + shards + "]" +
         (books.any() ? "," + books.json() : std::string()) + "}";
}

}  // namespace hetflow::actors::hp_job
