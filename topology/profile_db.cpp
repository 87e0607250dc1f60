#include "topology/profile_db.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace hetflow::topology {
namespace {

using json = nlohmann::json;

struct reader {
  const std::string& source;

  status err(const std::string& field, const std::string& what) const {
    return make_error(errc::invalid_argument, source + ": " + field + ": " + what);
  }
  // A non-negative number (integer or float).
  expected<double> number(const json& obj, const char* key, const std::string& field, bool required,
                          double fallback) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) return err(field + "." + key, "missing");
      return fallback;
    }
    if (!it->is_number()) return err(field + "." + key, "must be a number, got " + std::string(it->type_name()));
    double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) return err(field + "." + key, "must be finite and >= 0");
    return v;
  }
  expected<uint64_t> bytes(const json& obj, const char* key, const std::string& field, bool required,
                           uint64_t fallback) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) return err(field + "." + key, "missing");
      return fallback;
    }
    if (!it->is_number_integer() && !it->is_number_unsigned())
      return err(field + "." + key, "must be an integer number of bytes");
    if (it->is_number_integer() && it->get<int64_t>() < 0) return err(field + "." + key, "must be >= 0");
    return it->get<uint64_t>();
  }
};

}  // namespace

bool profile_db::has_kind(std::string_view kind) const {
  if (units.empty()) return false;
  return units.front().devices.find(kind) != units.front().devices.end();
}

void profile_db::add_scaled_kind(const std::string& from, const std::string& to, double f) {
  if (has_kind(to)) return;
  for (auto& u : units) {
    auto it = u.devices.find(from);
    if (it != u.devices.end()) u.devices[to] = {it->second.fwd_ms * f, it->second.bwd_ms * f};
  }
  profile_device pd = devices[from];
  pd.update_ms *= f;
  pd.wave_copy_ms *= f;
  pd.wave_sum_ms *= f;
  pd.wave_add_ms *= f;
  devices[to] = pd;
}

double profile_db::compute_ms(std::string_view kind, std::size_t first, std::size_t last) const {
  double s = 0;
  for (std::size_t i = first; i <= last && i < units.size(); ++i) {
    const auto& c = units[i].devices.find(kind)->second;
    s += c.fwd_ms + c.bwd_ms;
  }
  return s;
}

uint64_t profile_db::params_bytes(std::size_t first, std::size_t last) const {
  uint64_t s = 0;
  for (std::size_t i = first; i <= last && i < units.size(); ++i) s += units[i].params_bytes;
  return s;
}

uint64_t profile_db::activation_bytes(std::size_t first, std::size_t last) const {
  uint64_t s = 0;
  for (std::size_t i = first; i <= last && i < units.size(); ++i) s += units[i].activation_bytes;
  return s;
}

double profile_db::param_share(double whole_ms, std::size_t first, std::size_t last) const {
  const uint64_t all = units.empty() ? 0 : params_bytes(0, units.size() - 1);
  return whole_ms > 0 && all > 0 ? whole_ms * double(params_bytes(first, last)) / double(all) : 0.0;
}

double profile_db::update_ms(std::string_view kind, std::size_t first, std::size_t last) const {
  auto it = devices.find(kind);
  return it == devices.end() ? 0.0 : param_share(it->second.update_ms, first, last);
}

double profile_db::step_factor(std::string_view kind) const {
  auto it = devices.find(kind);
  return it == devices.end() || it->second.step_factor <= 0 ? 1.0 : it->second.step_factor;
}

double profile_db::whole_step_ms(std::string_view kind, int64_t rows) const {
  if (units.empty() || batch <= 0) return 0.0;
  const std::size_t last = units.size() - 1;
  return (compute_ms(kind, 0, last) * double(rows) / double(batch) + update_ms(kind, 0, last)) * step_factor(kind);
}

double profile_db::wave_sync_ms(std::string_view kind, std::size_t first, std::size_t last, bool shard_here) const {
  auto it = devices.find(kind);
  if (it == devices.end()) return 0.0;
  const double copy = it->second.wave_copy_ms, add = it->second.wave_add_ms;
  return param_share(2 * copy + add + (shard_here ? copy + add : 0.0), first, last);
}

double profile_db::wave_ms(std::string_view kind, std::size_t first, std::size_t last, int copies) const {
  auto it = devices.find(kind);
  return it == devices.end() ? 0.0 : param_share(it->second.wave_copy_ms * copies + it->second.wave_sum_ms, first, last);
}

profile_db profile_db::at_batch(int64_t b) const {
  if (b == batch || batch <= 0 || b <= 0) return *this;
  profile_db out = *this;
  const double f = double(b) / double(batch);
  out.batch = b;
  for (auto& u : out.units) {
    u.activation_bytes = uint64_t(std::llround(double(u.activation_bytes) * f));
    u.output_bytes = uint64_t(std::llround(double(u.output_bytes) * f));
    for (auto& [k, c] : u.devices) {
      c.fwd_ms *= f;
      c.bwd_ms *= f;
    }
  }
  return out;
}

double transfer_ms(uint64_t bytes, double gbps, double latency_us) {
  if (bytes == 0) return 0.0;
  const double bytes_per_ms = gbps * 1e9 / 8.0 / 1e3;
  return double(bytes) / bytes_per_ms + latency_us / 1e3;
}

expected<profile_db> parse_profile_db(std::string_view text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    return make_error(errc::parse_error, source + ": not valid JSON: " + e.what());
  }
  reader r{source};
  if (!doc.is_object()) return r.err("(top level)", "must be a JSON object");
  profile_db db;
  db.source = source;
  {
    auto it = doc.find("batch");
    if (it == doc.end()) return r.err("batch", "missing (the minibatch size the times were taken at)");
    if (!it->is_number_integer() || it->get<int64_t>() <= 0) return r.err("batch", "must be a positive integer");
    db.batch = it->get<int64_t>();
  }
  for (auto& [k, v] : doc.items())
    if (k != "batch" && k != "units" && k != "devices" && k != "links" && k != "model" && k != "comment")
      return r.err(k, "unknown key (expected batch, units, devices, links, model, comment)");

  auto devs = doc.find("devices");
  if (devs != doc.end()) {
    if (!devs->is_object()) return r.err("devices", "must be an object of kind -> {memory_bytes}");
    for (auto& [kind, d] : devs->items()) {
      if (!d.is_object()) return r.err("devices." + kind, "must be an object");
      for (auto& [k, v] : d.items())
        if (k != "memory_bytes" && k != "update_ms" && k != "wave_copy_ms" && k != "wave_sum_ms" && k != "wave_add_ms" &&
            k != "step_factor")
          return r.err("devices." + kind + "." + k,
                       "unknown key (expected memory_bytes, update_ms, wave_copy_ms, wave_sum_ms, wave_add_ms, "
                       "step_factor)");
      HF_ASSIGN_OR_RETURN(uint64_t mem, r.bytes(d, "memory_bytes", "devices." + kind, false, 0));
      HF_ASSIGN_OR_RETURN(double upd, r.number(d, "update_ms", "devices." + kind, false, 0.0));
      HF_ASSIGN_OR_RETURN(double wc, r.number(d, "wave_copy_ms", "devices." + kind, false, 0.0));
      HF_ASSIGN_OR_RETURN(double ws, r.number(d, "wave_sum_ms", "devices." + kind, false, 0.0));
      HF_ASSIGN_OR_RETURN(double wa, r.number(d, "wave_add_ms", "devices." + kind, false, 0.0));
      HF_ASSIGN_OR_RETURN(double sf, r.number(d, "step_factor", "devices." + kind, false, 0.0));
      if (!(sf >= 0) || sf > 100) return r.err("devices." + kind + ".step_factor", "must be > 0 and <= 100 (0: not given)");
      db.devices[kind].step_factor = sf;
      db.devices[kind].memory_bytes = mem;
      db.devices[kind].update_ms = upd;
      db.devices[kind].wave_copy_ms = wc;
      db.devices[kind].wave_sum_ms = ws;
      db.devices[kind].wave_add_ms = wa;
    }
  }
  auto links = doc.find("links");
  if (links != doc.end()) {
    if (!links->is_object()) return r.err("links", "must be an object");
    for (auto& [k, v] : links->items())
      if (k != "intra_node_gbps" && k != "inter_node_gbps" && k != "latency_us" && k != "host_ring_gbps" &&
          k != "host_ring_latency_us" && k != "host_ring_members" && k != "host_ring_step_factor" &&
          k != "host_stage_factor")
        return r.err("links." + k, "unknown key (expected intra_node_gbps, inter_node_gbps, latency_us, "
                                   "host_ring_gbps, host_ring_latency_us, host_ring_members, host_ring_step_factor, "
                                   "host_stage_factor)");
    HF_ASSIGN_OR_RETURN(db.links.intra_node_gbps,
                        r.number(*links, "intra_node_gbps", "links", false, db.links.intra_node_gbps));
    HF_ASSIGN_OR_RETURN(db.links.inter_node_gbps,
                        r.number(*links, "inter_node_gbps", "links", false, db.links.inter_node_gbps));
    HF_ASSIGN_OR_RETURN(db.links.latency_us, r.number(*links, "latency_us", "links", false, db.links.latency_us));
    HF_ASSIGN_OR_RETURN(db.links.host_ring_gbps, r.number(*links, "host_ring_gbps", "links", false, 0.0));
    HF_ASSIGN_OR_RETURN(db.links.host_ring_latency_us, r.number(*links, "host_ring_latency_us", "links", false, 0.0));
    if (db.links.host_ring_gbps < 0) return r.err("links.host_ring_gbps", "must be >= 0 (0: not measured)");
    if (db.links.host_ring_latency_us < 0) return r.err("links.host_ring_latency_us", "must be >= 0");
    HF_ASSIGN_OR_RETURN(double members, r.number(*links, "host_ring_members", "links", false, 0.0));
    if (members < 0 || members > 65536 || members != double(int(members)))
      return r.err("links.host_ring_members", "must be a whole number >= 0 (0: any)");
    db.links.host_ring_members = int(members);
    HF_ASSIGN_OR_RETURN(db.links.host_ring_step_factor,
                        r.number(*links, "host_ring_step_factor", "links", false, 0.0));
    if (db.links.host_ring_step_factor != 0 && !(db.links.host_ring_step_factor >= 1))
      return r.err("links.host_ring_step_factor", "must be >= 1 (0: not measured)");
    HF_ASSIGN_OR_RETURN(db.links.host_stage_factor, r.number(*links, "host_stage_factor", "links", false, 0.0));
    if (db.links.host_stage_factor != 0 && !(db.links.host_stage_factor >= 1))
      return r.err("links.host_stage_factor", "must be >= 1 (0: not measured)");
    if (db.links.intra_node_gbps <= 0) return r.err("links.intra_node_gbps", "must be > 0");
    if (db.links.inter_node_gbps <= 0) return r.err("links.inter_node_gbps", "must be > 0");
  }

  auto units = doc.find("units");
  if (units == doc.end()) return r.err("units", "missing (the model's units in order)");
  if (!units->is_array() || units->empty()) return r.err("units", "must be a non-empty array");
  std::set<std::string> kinds;
  for (auto& [kind, d] : db.devices) kinds.insert(kind);
  for (std::size_t i = 0; i < units->size(); ++i) {
    const json& u = (*units)[i];
    const std::string field = "units[" + std::to_string(i) + "]";
    if (!u.is_object()) return r.err(field, "must be an object");
    profile_unit pu;
    auto n = u.find("name");
    if (n == u.end() || !n->is_string() || n->get<std::string>().empty())
      return r.err(field + ".name", "missing or not a non-empty string");
    pu.name = n->get<std::string>();
    HF_ASSIGN_OR_RETURN(pu.params_bytes, r.bytes(u, "params_bytes", field, true, 0));
    HF_ASSIGN_OR_RETURN(pu.activation_bytes, r.bytes(u, "activation_bytes", field, true, 0));
    HF_ASSIGN_OR_RETURN(pu.output_bytes, r.bytes(u, "output_bytes", field, false, pu.activation_bytes));
    auto d = u.find("devices");
    if (d == u.end() || !d->is_object() || d->empty())
      return r.err(field + ".devices", "missing or empty (kind -> {fwd_ms, bwd_ms})");
    for (auto& [kind, c] : d->items()) {
      const std::string cf = field + ".devices." + kind;
      if (!c.is_object()) return r.err(cf, "must be an object {fwd_ms, bwd_ms}");
      unit_cost uc;
      HF_ASSIGN_OR_RETURN(uc.fwd_ms, r.number(c, "fwd_ms", cf, true, 0));
      HF_ASSIGN_OR_RETURN(uc.bwd_ms, r.number(c, "bwd_ms", cf, true, 0));
      pu.devices[kind] = uc;
      if (i == 0) kinds.insert(kind);
    }
    db.units.push_back(std::move(pu));
  }
  // Every unit has every kind.
  for (std::size_t i = 0; i < db.units.size(); ++i)
    for (const auto& kind : kinds) {
      if (db.units[i].devices.find(kind) == db.units[i].devices.end())
        return r.err("units[" + std::to_string(i) + "].devices." + kind,
                     "missing (unit '" + db.units[i].name + "' has no times for kind '" + kind +
                         "', which other units or \"devices\" name)");
    }
  for (const auto& kind : kinds) db.devices.try_emplace(kind);
  return db;
}

expected<profile_db> load_profile_db(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(errc::not_found, file.string() + ": cannot open the profile file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_profile_db(ss.str(), file.string());
}

std::string to_json(const profile_db& db, int indent) {
  json doc;
  doc["batch"] = db.batch;
  json units = json::array();
  for (const auto& u : db.units) {
    json ju;
    ju["name"] = u.name;
    ju["params_bytes"] = u.params_bytes;
    ju["activation_bytes"] = u.activation_bytes;
    ju["output_bytes"] = u.output_bytes;
    json d = json::object();
    for (const auto& [k, c] : u.devices) d[k] = json{{"fwd_ms", c.fwd_ms}, {"bwd_ms", c.bwd_ms}};
    ju["devices"] = d;
    units.push_back(ju);
  }
  doc["units"] = units;
  json devs = json::object();
  for (const auto& [k, d] : db.devices) {
    devs[k] = json{{"memory_bytes", d.memory_bytes}};
    if (d.update_ms > 0) devs[k]["update_ms"] = d.update_ms;
    if (d.wave_copy_ms > 0) devs[k]["wave_copy_ms"] = d.wave_copy_ms;
    if (d.wave_sum_ms > 0) devs[k]["wave_sum_ms"] = d.wave_sum_ms;
    if (d.wave_add_ms > 0) devs[k]["wave_add_ms"] = d.wave_add_ms;
    if (d.step_factor > 0) devs[k]["step_factor"] = d.step_factor;
  }
  doc["devices"] = devs;
  doc["links"] = json{{"intra_node_gbps", db.links.intra_node_gbps},
                      {"inter_node_gbps", db.links.inter_node_gbps},
                      {"latency_us", db.links.latency_us}};
  if (db.links.host_ring_gbps > 0) {
    doc["links"]["host_ring_gbps"] = db.links.host_ring_gbps;
    doc["links"]["host_ring_latency_us"] = db.links.host_ring_latency_us;
    if (db.links.host_ring_members > 0) doc["links"]["host_ring_members"] = db.links.host_ring_members;
    if (db.links.host_ring_step_factor > 0) doc["links"]["host_ring_step_factor"] = db.links.host_ring_step_factor;
  }
  if (db.links.host_stage_factor > 0) doc["links"]["host_stage_factor"] = db.links.host_stage_factor;
  return doc.dump(indent);
}

void prefix_kinds(profile_db& db, const std::string& prefix) {
  auto name = [&](const std::string& k) { return prefix + "-" + k; };
  for (auto& u : db.units) {
    std::map<std::string, unit_cost, std::less<>> d;
    for (auto& [k, c] : u.devices) d[name(k)] = c;
    u.devices = std::move(d);
  }
  std::map<std::string, profile_device, std::less<>> devs;
  for (auto& [k, d] : db.devices) devs[name(k)] = d;
  db.devices = std::move(devs);
}

expected<profile_db> merge_profile_dbs(const std::vector<profile_db>& dbs) {
  if (dbs.empty()) return make_error(errc::invalid_argument, "no profile to merge");
  profile_db out = dbs[0];
  std::map<std::string, std::string, std::less<>> owner;  // kind -> the file that brought it
  for (const auto& [k, d] : out.devices) owner[k] = dbs[0].source;
  std::string sources = dbs[0].source;
  for (std::size_t f = 1; f < dbs.size(); ++f) {
    const profile_db& b = dbs[f];
    const std::string both = dbs[0].source + " and " + b.source;
    if (b.batch != out.batch)
      return make_error(errc::invalid_argument, both + ": batch " + std::to_string(out.batch) + " and " +
                                                    std::to_string(b.batch) +
                                                    " (measure every machine at one batch: --batch)");
    if (b.units.size() != out.units.size())
      return make_error(errc::invalid_argument, both + ": " + std::to_string(out.units.size()) + " and " +
                                                    std::to_string(b.units.size()) +
                                                    " units (profiles of one job's model only)");
    for (std::size_t i = 0; i < b.units.size(); ++i) {
      const profile_unit& u = b.units[i];
      profile_unit& o = out.units[i];
      const std::string at = both + ": unit " + std::to_string(i);
      if (u.name != o.name)
        return make_error(errc::invalid_argument, at + " is '" + o.name + "' and '" + u.name +
                                                      "' (profiles of one job's model only)");
      if (u.params_bytes != o.params_bytes)
        return make_error(errc::invalid_argument, at + " ('" + u.name + "') has " + std::to_string(o.params_bytes) +
                                                      " and " + std::to_string(u.params_bytes) +
                                                      " parameter bytes (profiles of one job's model only)");
      o.activation_bytes = std::max(o.activation_bytes, u.activation_bytes);
      o.output_bytes = std::max(o.output_bytes, u.output_bytes);
    }
    for (const auto& [k, d] : b.devices) {
      if (auto it = owner.find(k); it != owner.end())
        return make_error(errc::invalid_argument, "device kind '" + k + "' is in " + it->second + " and in " +
                                                      b.source + " (name each machine's kinds apart: "
                                                      "hetflow profile --out FILE --as NAME)");
      owner[k] = b.source;
      out.devices[k] = d;
      for (std::size_t i = 0; i < b.units.size(); ++i) {
        auto c = b.units[i].devices.find(k);
        if (c == b.units[i].devices.end())
          return make_error(errc::invalid_argument, b.source + ": unit '" + b.units[i].name +
                                                        "' has no times for kind '" + k + "'");
        out.units[i].devices[k] = c->second;
      }
    }
    sources += ", " + b.source;
  }
  out.source = "merged from " + sources;
  return out;
}

}  // namespace hetflow::topology
