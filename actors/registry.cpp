#include "actors/registry.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "actors/log.hpp"

namespace hetflow::actors {

status registry::add_actor_type(topology::type_spec spec, actor_factory spawn) {
  if (spec.name.empty()) return make_error(errc::invalid_argument, "actor type with an empty name");
  if (!spawn) return make_error(errc::invalid_argument, "actor type '" + spec.name + "' has no factory");
  if (find_actor_type(spec.name) != nullptr)
    return make_error(errc::already_exists, "actor type '" + spec.name + "' is registered twice");
  actor_types_.push_back({std::move(spec), std::move(spawn)});
  return {};
}

status registry::add_job_kind(topology::type_spec spec, job_expander expand,
                              job_summarizer summarize) {
  if (spec.name.empty()) return make_error(errc::invalid_argument, "job kind with an empty name");
  if (find_job_kind(spec.name) != nullptr)
    return make_error(errc::already_exists, "job kind '" + spec.name + "' is registered twice");
  job_kinds_.push_back({std::move(spec), std::move(expand), std::move(summarize)});
  return {};
}

status registry::add_transform(transform_entry entry) {
  if (entry.name.empty()) return make_error(errc::invalid_argument, "transform with an empty name");
  if (!entry.make) return make_error(errc::invalid_argument, "transform '" + entry.name + "' has no factory");
  for (char ch : entry.name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-'))
      return make_error(errc::invalid_argument, "transform name '" + entry.name +
                                                    "': use letters, digits, '_' and '-' (it names a [job] table)");
  if (find_transform(entry.name) != nullptr)
    return make_error(errc::already_exists, "transform '" + entry.name + "' is registered twice");
  // Its keys become the table [job] NAME of the job kinds that take
  // transforms: the name must not be one of their keys already.
  for (auto& j : job_kinds_) {
    const auto& keys = j.spec.keys;
    if (std::none_of(keys.begin(), keys.end(), [](const topology::key_spec& k) { return k.name == "transforms"; }))
      continue;
    for (const auto& k : keys)
      if (k.name == entry.name)
        return make_error(errc::already_exists, "transform name '" + entry.name + "' is a [job] key of job kind '" +
                                                    j.spec.name + "'; rename the transform");
  }
  transforms_.push_back(std::move(entry));
  return {};
}

const transform_entry* registry::find_transform(std::string_view name) const {
  for (auto& e : transforms_)
    if (e.name == name) return &e;
  return nullptr;
}

expected<std::vector<sample_transform>> registry::make_transforms(const topology::settings& job) const {
  std::vector<sample_transform> out;
  for (const auto& name : job.get_strings("transforms")) {
    const transform_entry* e = find_transform(name);
    if (e == nullptr) {
      std::string known;
      for (auto& t : transforms_) known += (known.empty() ? "" : ", ") + t.name;
      return make_error(errc::not_found, "[job] transforms: unknown transform '" + name + "' (" +
                                             (known.empty() ? std::string("none is registered")
                                                            : "registered: " + known) +
                                             "; plugins add transforms, README \"Write your own actor type\")");
    }
    auto t = e->make(job);
    if (!t) return make_error(t.error().code(), "[job] transforms: '" + name + "': " + t.error().message());
    if (!*t) return make_error(errc::internal, "[job] transforms: '" + name + "': the factory made no transform");
    out.push_back(std::move(*t));
  }
  return out;
}

const actor_type_entry* registry::find_actor_type(std::string_view name) const {
  for (auto& e : actor_types_)
    if (e.spec.name == name) return &e;
  return nullptr;
}

const job_kind_entry* registry::find_job_kind(std::string_view name) const {
  for (auto& e : job_kinds_)
    if (e.spec.name == name) return &e;
  return nullptr;
}

topology::catalog registry::catalog() const {
  topology::catalog c;
  for (auto& e : actor_types_) c.actor_types.push_back(e.spec);
  for (auto& e : job_kinds_) {
    c.job_kinds.push_back(e.spec);
    auto& spec = c.job_kinds.back();
    const bool takes = std::any_of(spec.keys.begin(), spec.keys.end(),
                                   [](const topology::key_spec& k) { return k.name == "transforms"; });
    if (!takes) continue;
    for (auto& t : transforms_) {
      if (t.keys.empty()) continue;
      topology::key_spec table{t.name, topology::key_type::table, false, std::nullopt,
                               "transform '" + t.name + "' (plugin): " + t.help, {}, {}, {}};
      table.fields = t.keys;
      spec.keys.push_back(std::move(table));
    }
  }
  return c;
}

expected<std::vector<topology::actor_spec>> job_actors(const topology::cluster& c,
                                                      const registry& reg) {
  std::vector<topology::actor_spec> all = c.actors;
  const job_kind_entry* kind = reg.find_job_kind(c.job.kind);
  if (kind == nullptr)
    return make_error(errc::not_found, "unknown job kind '" + c.job.kind + "'");
  if (kind->expand) {
    auto extra = kind->expand(c);
    if (!extra) return extra.error();
    for (auto& a : *extra) all.push_back(std::move(a));
  }
  std::set<std::string> names;
  for (auto& a : all) {
    if (!names.insert(a.name).second)
      return make_error(errc::already_exists,
                        "actor name '" + a.name + "' is used twice (job '" + c.job.kind + "')");
    if (reg.find_actor_type(a.type) == nullptr)
      return make_error(errc::not_found,
                        "actor '" + a.name + "' has unknown type '" + a.type + "'");
    if (c.find_node(a.node) == nullptr)
      return make_error(errc::not_found,
                        "actor '" + a.name + "' is placed on unknown node '" + a.node + "'");
  }
  return all;
}

std::set<int> expendable_nodes(const topology::cluster& c, const std::vector<topology::actor_spec>& actors) {
  std::set<int> out;
  std::set<std::string> types;  // the job's replaceable actor types
  std::string keep;             // a node that holds this actor stays essential
  const auto& p = c.job.params;
  if (c.job.kind == "train" && p.get_string("strategy", "single") == "dp") {
    if (p.get_bool("dp_failover", true)) types = {"dp_replica", "ring_member"};
    keep = "replica0";  // writes the weights and checkpoints, logs progress
  } else if (c.job.kind == "train" && p.get_bool("stream_failover", true)) {
    types = {"stream_shard"};
  }
  if (c.job.kind == "preprocess" && p.get_bool("shard_failover", true)) types = {"preprocess_shard"};
  if (types.empty()) return out;
  std::map<std::string, bool> only_shards;  // node -> all its actors are of those types
  for (const auto& a : actors) {
    auto [it, fresh] = only_shards.emplace(a.node, true);
    if (!types.count(a.type) || a.name == keep) it->second = false;
  }
  for (std::size_t i = 1; i < c.nodes.size(); ++i)
    if (auto it = only_shards.find(c.nodes[i].name); it != only_shards.end() && it->second) out.insert(int(i));
  return out;
}

}  // namespace hetflow::actors
