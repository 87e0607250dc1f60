// The semantic pass over a parsed topology document: walks it once, records
// every problem as a diagnostic, and builds the cluster from what is valid.
//
// Where a diagnostic points:
//   unknown key / duplicate name      -> the key or the name's value
//   wrong type / bad value / range    -> the value (an array element for lists)
//   missing key                       -> the table that lacks it (its [header] or '{')
//   missing top-level table           -> {0,0}, printed as 1:1
#include "topology/document_check.hpp"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "topology/suggest.hpp"
#include "topology/units.hpp"

namespace hetflow::topology::detail {

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------- helpers

source_loc loc(const toml::source_region& r) { return to_source_loc(r); }
source_loc loc(const toml::node& n) { return loc(n.source()); }

// 'value' for messages: control characters escaped, long values shortened.
std::string quote(std::string_view s) {
  std::string out = "'";
  size_t shown = 0;
  for (char c : s) {
    if (++shown > 64) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (u < 0x20 || u == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else out += c;
  }
  return out + "'";
}

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "floating-point number";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// 'a', 'b' or 'c'
std::string list_quoted(const std::vector<std::string>& xs, const char* last_sep = " or ") {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i > 0) out += (i + 1 == xs.size()) ? last_sep : ", ";
    out += "'" + xs[i] + "'";
  }
  return out;
}

bool valid_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool looks_like_integer(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

key_spec spec(std::string name, key_type type, bool required = false,
              std::optional<setting_value> def = std::nullopt, std::optional<double> min = {},
              std::optional<double> max = {}, std::vector<std::string> one_of = {}) {
  key_spec k;
  k.name = std::move(name);
  k.type = type;
  k.required = required;
  k.default_value = std::move(def);
  k.min = min;
  k.max = max;
  k.one_of = std::move(one_of);
  return k;
}

// ---- the fixed sections' keys (the catalog supplies [job] and actor args)

const std::vector<key_spec>& cluster_specs() {
  static const std::vector<key_spec> s = {
      spec("name", key_type::string, true),
      spec("join_timeout", key_type::duration, false, 60.0, 1e-3),
      spec("heartbeat_interval", key_type::duration, false, 0.2, 1e-3),
      spec("connection_timeout", key_type::duration, false, 1.0, 1e-3),
      spec("data_plane", key_type::string, false, std::string("auto"), {}, {},
           {"auto", "ucx", "caf"}),
      spec("ucx_tls", key_type::string, false, std::string()),
      spec("ucx_error_mode", key_type::string, false, std::string("auto"), {}, {},
           {"auto", "peer", "none"}),
      spec("ucx_net_devices", key_type::string, false, std::string("auto")),
      spec("scheduler_threads", key_type::integer, false, int64_t{0}, 0, 4096),
      spec("thread_slice_us", key_type::integer, false, int64_t{100}, 0, 100000),
      spec("max_message", key_type::size, false, int64_t{1} << 30, double(1 << 20)),
      spec("pin_local_nodes", key_type::string, false, std::string("auto"), {}, {}, {"auto", "off"}),
      spec("secret_file", key_type::string, false, std::string()),
      spec("secret_env", key_type::string, false, std::string()),
      spec("metrics_port", key_type::integer, false, int64_t{0}, 0, 65535),
      spec("watchdog", key_type::duration, false, 60.0, 0.0),
  };
  return s;
}
const std::vector<std::string> cluster_extra = {"plugins"};

const std::vector<key_spec>& node_specs() {
  static const std::vector<key_spec> s = {
      spec("name", key_type::string, true),
      spec("host", key_type::string, true),
      spec("port", key_type::integer, true, std::nullopt, 1, 65535),
      spec("cpus", key_type::string, false, std::string()),
  };
  return s;
}
const std::vector<std::string> node_extra = {"devices"};

const std::vector<key_spec>& device_specs() {
  static const std::vector<key_spec> s = {
      spec("index", key_type::integer, false, int64_t{0}, 0, 1023),
      spec("threads", key_type::integer, false, int64_t{0}, 0, 65535),
      spec("memory", key_type::size, false, int64_t{0}),
      spec("profile", key_type::string, false, std::string()),
      spec("speed", key_type::number, false, 1.0, 0.001, 1000.0),
  };
  return s;
}
const std::vector<std::string> device_extra = {"kind"};

const std::vector<key_spec>& actor_specs() {
  static const std::vector<key_spec> s = {
      spec("name", key_type::string, true),
      spec("type", key_type::string, true),
      spec("node", key_type::string, true),
  };
  return s;
}
const std::vector<std::string> actor_extra = {"args"};

const std::vector<std::string> top_level_keys = {"cluster", "nodes", "job", "actors"};

enum class section { cluster, node, device, job, actor, args };

// If `key` is a key of another fixed section, say where it belongs.
std::string belongs_elsewhere(std::string_view key, section here) {
  auto has = [&](const std::vector<key_spec>& specs, const std::vector<std::string>& extra) {
    for (const auto& s : specs)
      if (s.name == key) return true;
    return std::find(extra.begin(), extra.end(), key) != extra.end();
  };
  if (here != section::cluster && has(cluster_specs(), cluster_extra))
    return "; '" + std::string(key) + "' belongs in [cluster]";
  if (here != section::node && has(node_specs(), node_extra))
    return "; '" + std::string(key) + "' belongs in a [[nodes]] table";
  if (here != section::device && has(device_specs(), device_extra))
    return "; '" + std::string(key) + "' belongs in a device table (devices = [ { ... } ])";
  if (here != section::actor && here != section::args && has(actor_specs(), actor_extra))
    return "; '" + std::string(key) + "' belongs in an [[actors]] table";
  return {};
}

// ---------------------------------------------------------------- validator

class validator {
public:
  validator(const catalog& cat, std::string file, fs::path base_dir)
      : cat_(cat), file_(std::move(file)), base_dir_(std::move(base_dir)) {}

  void error(source_loc where, std::string message) {
    errors_.push_back(diagnostic{file_, where, std::move(message)});
  }

  std::vector<diagnostic> take_errors() { return std::move(errors_); }
  bool has_errors() const { return !errors_.empty(); }

  cluster run(const toml::table& root);

private:
  // Checks `t` (null = the table is absent) against `specs`: unknown keys,
  // required keys, types, bounds; fills `out` with values and defaults.
  // `extra` keys are known but handled by the caller.
  void check_table(const toml::table* t, source_loc table_loc, const std::string& what,
                   const std::vector<key_spec>& specs, const std::vector<std::string>& extra,
                   section sec, settings& out, const std::string& prefix = {});
  // A key_type::table value (or its shorthand); fields go to out as "name.field".
  void read_table_key(const toml::node* n, const key_spec& s, const std::string& prefix, settings& out);
  void check_unknown_keys(const toml::table& t, const std::string& what,
                          const std::vector<std::string>& known, section sec);
  std::optional<setting_value> convert(const toml::node& n, const key_spec& s,
                                       const std::string& label);
  std::optional<int64_t> read_size(const toml::node& n, const std::string& label);
  std::optional<double> read_duration(const toml::node& n, const std::string& label);
  std::optional<std::string> read_path(const toml::node& n, const std::string& label);
  bool check_bounds(double x, const key_spec& s, const toml::node& n, const std::string& label);
  std::string show(double x, key_type t) const;
  void wrong_type(const toml::node& n, const std::string& label, const std::string& expected,
                  const std::string& hint = {});

  void read_cluster(const toml::node* n, const toml::key* k, cluster& c);
  void check_secret(const toml::table* t, const settings& s, cluster& c);
  void read_nodes(const toml::node* n, const toml::key* k, cluster& c);
  void read_devices(const toml::node& n, const std::string& node_what, node_spec& node);
  void read_job(const toml::node* n, const toml::key* k, cluster& c);
  void read_actors(const toml::node& n, const toml::key& k, cluster& c);

  const catalog& cat_;
  std::string file_;
  fs::path base_dir_;
  std::vector<diagnostic> errors_;
  // Node names as written, for "actor on unknown node" (includes nodes whose
  // other keys had errors, so one typo does not cascade).
  std::vector<std::string> node_names_;
};

void validator::wrong_type(const toml::node& n, const std::string& label,
                           const std::string& expected, const std::string& hint) {
  error(loc(n), label + " must be " + expected + ", found " + type_name(n) + hint);
}

std::string validator::show(double x, key_type t) const {
  switch (t) {
    case key_type::size:
    case key_type::size_list: return format_size(static_cast<uint64_t>(std::max(0.0, x)));
    case key_type::duration: return format_duration(x);
    default: break;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

bool validator::check_bounds(double x, const key_spec& s, const toml::node& n,
                             const std::string& label) {
  const bool low = s.min && x < *s.min;
  const bool high = s.max && x > *s.max;
  if (!low && !high) return true;
  std::string range;
  if (s.min && s.max) range = "between " + show(*s.min, s.type) + " and " + show(*s.max, s.type);
  else if (s.min) range = "at least " + show(*s.min, s.type);
  else range = "at most " + show(*s.max, s.type);
  error(loc(n), label + " is " + show(x, s.type) + "; it must be " + range);
  return false;
}

std::optional<int64_t> validator::read_size(const toml::node& n, const std::string& label) {
  if (auto v = n.as_integer()) {
    if (v->get() < 0) {
      error(loc(n), label + " is " + std::to_string(v->get()) + "; a size cannot be negative");
      return std::nullopt;
    }
    return v->get();
  }
  if (auto v = n.as_string()) {
    auto r = parse_size(v->get());
    if (!r) {
      error(loc(n), label + ": " + r.error().message());
      return std::nullopt;
    }
    return static_cast<int64_t>(*r);
  }
  wrong_type(n, label, "a size (a string such as \"4GiB\" or an integer number of bytes)");
  return std::nullopt;
}

std::optional<double> validator::read_duration(const toml::node& n, const std::string& label) {
  if (n.is_integer() || n.is_floating_point()) {
    const double x = n.is_integer() ? static_cast<double>(n.as_integer()->get())
                                    : n.as_floating_point()->get();
    if (!std::isfinite(x)) {
      error(loc(n), label + " must be a finite number of seconds");
      return std::nullopt;
    }
    if (x < 0) {
      error(loc(n), label + " is " + show(x, key_type::number) + "; a duration cannot be negative");
      return std::nullopt;
    }
    return x;
  }
  if (auto v = n.as_string()) {
    auto r = parse_duration(v->get());
    if (!r) {
      error(loc(n), label + ": " + r.error().message());
      return std::nullopt;
    }
    return *r;
  }
  wrong_type(n, label, "a duration (a string such as \"200ms\" or a number of seconds)");
  return std::nullopt;
}

std::optional<std::string> validator::read_path(const toml::node& n, const std::string& label) {
  auto v = n.as_string();
  if (!v) {
    wrong_type(n, label, "a string (a path)");
    return std::nullopt;
  }
  const std::string& text = v->get();
  if (text.empty()) {
    error(loc(n), label + " is empty; it must name a file");
    return std::nullopt;
  }
  fs::path p(text);
  fs::path abs = (p.is_absolute() ? p : base_dir_ / p).lexically_normal();
  std::error_code ec;
  if (!fs::exists(abs, ec)) {
    error(loc(n), label + ": file " + quote(text) + " not found (looked for " + abs.string() + ")");
    return std::nullopt;
  }
  return abs.string();
}

std::optional<setting_value> validator::convert(const toml::node& n, const key_spec& s,
                                                const std::string& label) {
  switch (s.type) {
    case key_type::boolean:
      if (auto v = n.as_boolean()) return setting_value{v->get()};
      wrong_type(n, label, "a boolean (true or false)");
      return std::nullopt;

    case key_type::integer: {
      auto v = n.as_integer();
      if (!v) {
        std::string hint;
        if (auto str = n.as_string(); str && looks_like_integer(str->get()))
          hint = "; write " + s.name + " = " + str->get() + " without quotes";
        wrong_type(n, label, "an integer", hint);
        return std::nullopt;
      }
      if (!check_bounds(static_cast<double>(v->get()), s, n, label)) return std::nullopt;
      return setting_value{v->get()};
    }

    case key_type::number: {
      if (!n.is_integer() && !n.is_floating_point()) {
        wrong_type(n, label, "a number");
        return std::nullopt;
      }
      const double x = n.is_integer() ? static_cast<double>(n.as_integer()->get())
                                      : n.as_floating_point()->get();
      if (!std::isfinite(x)) {
        error(loc(n), label + " must be a finite number");
        return std::nullopt;
      }
      if (!check_bounds(x, s, n, label)) return std::nullopt;
      return setting_value{x};
    }

    case key_type::string: {
      auto v = n.as_string();
      if (!v) {
        wrong_type(n, label, "a string");
        return std::nullopt;
      }
      if (!s.one_of.empty() &&
          std::find(s.one_of.begin(), s.one_of.end(), v->get()) == s.one_of.end()) {
        error(loc(n), label + " is " + quote(v->get()) + "; expected " + list_quoted(s.one_of) +
                          did_you_mean(v->get(), s.one_of));
        return std::nullopt;
      }
      return setting_value{v->get()};
    }

    case key_type::size: {
      auto b = read_size(n, label);
      if (!b || !check_bounds(static_cast<double>(*b), s, n, label)) return std::nullopt;
      return setting_value{*b};
    }

    case key_type::duration: {
      auto d = read_duration(n, label);
      if (!d || !check_bounds(*d, s, n, label)) return std::nullopt;
      return setting_value{*d};
    }

    case key_type::path: {
      auto p = read_path(n, label);
      if (!p) return std::nullopt;
      return setting_value{std::move(*p)};
    }

    case key_type::string_list:
    case key_type::path_list:
    case key_type::size_list: {
      auto arr = n.as_array();
      const char* what = s.type == key_type::size_list ? "an array of sizes"
                         : s.type == key_type::path_list ? "an array of paths"
                                                          : "an array of strings";
      if (!arr) {
        std::string hint;
        if (n.is_string() || n.is_integer())
          hint = "; write " + s.name + " = [ ... ] even for one element";
        wrong_type(n, label, what, hint);
        return std::nullopt;
      }
      bool ok = true;
      std::vector<std::string> strings;
      std::vector<int64_t> ints;
      for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        const std::string elabel = "element " + std::to_string(i + 1) + " of " + label;
        if (s.type == key_type::size_list) {
          auto b = read_size(e, elabel);
          if (b && check_bounds(static_cast<double>(*b), s, e, elabel)) ints.push_back(*b);
          else ok = false;
        } else if (s.type == key_type::path_list) {
          auto p = read_path(e, elabel);
          if (p) strings.push_back(std::move(*p));
          else ok = false;
        } else if (auto str = e.as_string()) {
          strings.push_back(str->get());
        } else {
          wrong_type(e, elabel, "a string");
          ok = false;
        }
      }
      if (!ok) return std::nullopt;
      if (s.type == key_type::size_list) return setting_value{std::move(ints)};
      return setting_value{std::move(strings)};
    }

    case key_type::table: break;  // read_table_key
  }
  return std::nullopt;
}

void validator::check_unknown_keys(const toml::table& t, const std::string& what,
                                   const std::vector<std::string>& known, section sec) {
  for (auto&& [k, v] : t) {
    (void)v;
    const std::string_view name = k.str();
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string msg = "unknown key " + quote(name) + " in " + what;
    std::string hint = did_you_mean(name, known);
    if (hint.empty()) hint = belongs_elsewhere(name, sec);
    if (hint.empty() && !known.empty()) hint = " (known keys: " + list_quoted(known, ", ") + ")";
    error(loc(k.source()), msg + hint);
  }
}

void validator::read_table_key(const toml::node* n, const key_spec& s, const std::string& prefix,
                               settings& out) {
  const std::string name = prefix + s.name;
  const std::string label = "'" + name + "'";
  settings sub;
  std::vector<std::string> given;  // fields written in the file
  const toml::table* t = n ? n->as_table() : nullptr;
  const key_spec* short_field = nullptr;
  for (const auto& f : s.fields)
    if (!s.shorthand.empty() && f.name == s.shorthand) short_field = &f;
  if (!n) {
    check_table(nullptr, {}, label, s.fields, {}, section::args, sub, name + ".");
  } else if (t) {
    check_table(t, loc(*t), label, s.fields, {}, section::args, sub, name + ".");
    for (auto&& [k, v] : *t) {
      (void)v;
      given.emplace_back(k.str());
    }
  } else if (short_field && !n->is_array()) {
    // name = v  is  name = { shorthand = v }
    auto v = convert(*n, *short_field, label);
    if (!v) return;
    check_table(nullptr, {}, label, s.fields, {}, section::args, sub, name + ".");
    sub.set(short_field->name, std::move(*v));
    given.push_back(short_field->name);
  } else {
    std::vector<std::string> names;
    for (const auto& f : s.fields) names.push_back(f.name + " = ...");
    std::string example = "{ " + (names.empty() ? std::string() : names.front()) + (names.size() > 1 ? ", ... }" : " }");
    wrong_type(*n, label, "a table such as " + example +
                              (short_field ? std::string(" or a ") + to_string(short_field->type) + " (its '" +
                                                 short_field->name + "')"
                                           : std::string()));
    return;
  }
  // Fields that apply only with a sibling's value.
  for (const auto& f : s.fields) {
    if (f.only_with.size() != 2 || std::find(given.begin(), given.end(), f.name) == given.end()) continue;
    const std::string sib = sub.get_string(f.only_with[0]);
    if (!sub.contains(f.only_with[0]) || sib == f.only_with[1]) continue;
    const toml::node* fn = t ? t->get(f.name) : n;
    error(loc(*fn), "'" + name + "." + f.name + "' applies only with " + f.only_with[0] + " = '" + f.only_with[1] +
                        "' (here " + f.only_with[0] + " is " + quote(sib) + ")");
  }
  for (auto& [k, v] : sub.values()) out.set(settings::field_key(s.name, k), v);
}

void validator::check_table(const toml::table* t, source_loc table_loc, const std::string& what,
                            const std::vector<key_spec>& specs,
                            const std::vector<std::string>& extra, section sec, settings& out,
                            const std::string& prefix) {
  if (t) {
    std::vector<std::string> known;
    for (const auto& s : specs) known.push_back(s.name);
    known.insert(known.end(), extra.begin(), extra.end());
    check_unknown_keys(*t, what, known, sec);
  }
  for (const auto& s : specs) {
    const toml::node* n = t ? t->get(s.name) : nullptr;
    if (s.type == key_type::table) {
      if (!n && s.required) {
        error(table_loc, what + " has no '" + s.name + "'");
        continue;
      }
      read_table_key(n, s, prefix, out);
      // A field and its flat alias in this table say the same thing: one of them.
      for (const auto& f : s.fields) {
        if (f.alias_of.empty() || !t || !n || !n->is_table()) continue;
        const toml::node* fn = n->as_table()->get(f.name);
        const toml::node* an = t->get(f.alias_of);
        if (fn && an)
          error(loc(*fn), "'" + prefix + s.name + "." + f.name + "' and '" + prefix + f.alias_of + "' (line " +
                              std::to_string(loc(*an).line) + ") say the same; keep one (the table form is preferred)");
      }
      continue;
    }
    if (!n) {
      if (s.required) {
        std::string msg = what + " has no '" + s.name + "'";
        if (sec == section::job || sec == section::args) {
          msg += std::string(" (") + to_string(s.type);
          if (!s.help.empty()) msg += ": " + s.help;
          msg += ")";
        }
        error(table_loc, msg);
      } else if (s.default_value) {
        setting_value def = *s.default_value;
        // Paths are promised absolute; a relative default is relative to the file.
        if (s.type == key_type::path) {
          if (auto* str = std::get_if<std::string>(&def); str && !str->empty()) {
            fs::path p(*str);
            if (!p.is_absolute()) *str = (base_dir_ / p).lexically_normal().string();
          }
        } else if (s.type == key_type::path_list) {
          if (auto* strs = std::get_if<std::vector<std::string>>(&def)) {
            for (auto& str : *strs) {
              fs::path p(str);
              if (!p.is_absolute()) str = (base_dir_ / p).lexically_normal().string();
            }
          }
        }
        out.set(s.name, std::move(def));
      }
      continue;
    }
    if (auto v = convert(*n, s, "'" + prefix + s.name + "'")) out.set(s.name, std::move(*v));
  }
}

// ---- [cluster]

void validator::read_cluster(const toml::node* n, const toml::key* k, cluster& c) {
  if (!n) {
    error({}, "missing [cluster] table; a topology needs [cluster], [[nodes]] and [job]");
    return;
  }
  const toml::table* t = n->as_table();
  if (!t) {
    error(loc(k->source()),
          std::string("'cluster' must be a table ([cluster]), found ") + type_name(*n));
    return;
  }
  settings s;
  check_table(t, loc(*t), "[cluster]", cluster_specs(), cluster_extra, section::cluster, s);
  if (const toml::node* name = t->get("name"); name && name->is_string() &&
                                                  name->as_string()->get().empty())
    error(loc(*name), "'name' is empty; give the cluster a name");
  c.name = s.get_string("name");
  c.runtime.join_timeout_s = s.get_number("join_timeout", 60.0);
  c.runtime.heartbeat_interval_s = s.get_number("heartbeat_interval", 0.2);
  c.runtime.connection_timeout_s = s.get_number("connection_timeout", 1.0);
  c.runtime.data_plane = s.get_string("data_plane", "auto");
  c.runtime.ucx_tls = s.get_string("ucx_tls");
  c.runtime.ucx_error_mode = s.get_string("ucx_error_mode", "auto");
  c.runtime.ucx_net_devices = s.get_string("ucx_net_devices", "auto");
  c.runtime.scheduler_threads = static_cast<int>(s.get_int("scheduler_threads", 0));
  c.runtime.thread_slice_us = static_cast<int>(s.get_int("thread_slice_us", 100));
  c.runtime.max_message_bytes = static_cast<uint64_t>(s.get_int("max_message", 1ll << 30));
  c.runtime.pin_local_nodes = s.get_string("pin_local_nodes", "auto");
  c.runtime.metrics_port = static_cast<int>(s.get_int("metrics_port", 0));
  c.runtime.watchdog_s = s.get_number("watchdog", 60.0);
  check_secret(t, s, c);

  if (const toml::node* p = t->get("plugins")) {
    const toml::array* arr = p->as_array();
    if (!arr) {
      wrong_type(*p, "'plugins'", "an array of paths",
                 p->is_string() ? "; write plugins = [\"...\"] even for one plugin" : "");
      return;
    }
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      const std::string label = "element " + std::to_string(i + 1) + " of 'plugins'";
      auto str = e.as_string();
      if (!str) {
        wrong_type(e, label, "a string (a path to a shared library)");
        continue;
      }
      if (str->get().empty()) {
        error(loc(e), label + " is empty; it must name a shared library");
        continue;
      }
      fs::path rel(str->get());
      fs::path abs = (rel.is_absolute() ? rel : base_dir_ / rel).lexically_normal();
      std::error_code ec;
      auto st = fs::status(abs, ec);
      if (ec || !fs::exists(st)) {
        error(loc(e), "plugin " + quote(str->get()) + " not found (looked for " + abs.string() + ")");
      } else if (!fs::is_regular_file(st)) {
        error(loc(e), "plugin " + quote(str->get()) + " is not a regular file (" + abs.string() +
                          "); it must be a shared library");
      } else {
        c.plugins.push_back(abs);
      }
    }
  }
}

// secret_file / secret_env: one or the other. The file must exist and be a
// non-empty regular file here; its content is read by each node at start-up
// (validate may run elsewhere). The variable's value is checked there too.
void validator::check_secret(const toml::table* t, const settings& s, cluster& c) {
  const toml::node* file = t->get("secret_file");
  const toml::node* env = t->get("secret_env");
  const std::string file_text = s.get_string("secret_file");
  const std::string env_text = s.get_string("secret_env");
  if (file && env && !file_text.empty() && !env_text.empty()) {
    error(loc(*env), "'secret_env' and 'secret_file' both set; give the cluster secret one way");
    return;
  }
  if (file && file->is_string()) {
    if (file_text.empty()) {
      error(loc(*file), "'secret_file' is empty; name a file holding the cluster secret (or leave the key out)");
      return;
    }
    fs::path rel(file_text);
    fs::path abs = (rel.is_absolute() ? rel : base_dir_ / rel).lexically_normal();
    std::error_code ec;
    auto st = fs::status(abs, ec);
    if (ec || !fs::exists(st)) {
      error(loc(*file), "secret file " + quote(file_text) + " not found (looked for " + abs.string() +
                            "); create it, e.g. head -c 32 /dev/urandom | base64 > " + abs.string());
      return;
    }
    if (!fs::is_regular_file(st)) {
      error(loc(*file), "secret file " + quote(file_text) + " is not a regular file (" + abs.string() + ")");
      return;
    }
    if (fs::file_size(abs, ec) == 0 && !ec) {
      error(loc(*file), "secret file " + quote(file_text) + " is empty (" + abs.string() + ")");
      return;
    }
    c.runtime.secret_file = abs;
  }
  if (env && env->is_string()) {
    bool valid = !env_text.empty() && !(env_text[0] >= '0' && env_text[0] <= '9');
    for (char ch : env_text)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) valid = false;
    if (!valid) {
      error(loc(*env), "'secret_env' must name an environment variable ([A-Za-z_][A-Za-z0-9_]*), got " +
                           quote(env_text));
      return;
    }
    c.runtime.secret_env = env_text;
  }
}

// ---- [[nodes]]

void validator::read_devices(const toml::node& n, const std::string& node_what, node_spec& node) {
  const toml::array* arr = n.as_array();
  if (!arr) {
    std::string hint = n.is_table() ? "; write [[nodes.devices]] (double brackets) or "
                                      "devices = [ { kind = \"cpu\" } ]"
                                    : "";
    wrong_type(n, "'devices' of " + node_what, "an array of device tables", hint);
    return;
  }
  if (arr->empty()) {
    error(loc(n), "'devices' of " + node_what +
                      " is empty; list the node's devices, or leave 'devices' out for one cpu "
                      "device");
    return;
  }
  struct seen_device {
    device_kind kind;
    int index;
    source_loc where;
  };
  std::vector<seen_device> seen;
  static const std::vector<std::string> kinds = {"cpu", "cuda"};
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    const std::string what = "device #" + std::to_string(i + 1) + " of " + node_what;
    const toml::table* t = e.as_table();
    if (!t) {
      wrong_type(e, what, "a table such as { kind = \"cpu\" }");
      continue;
    }
    settings s;
    const size_t errors_before = errors_.size();
    check_table(t, loc(*t), what, device_specs(), device_extra, section::device, s);
    device_spec d;
    d.where = loc(*t);
    bool ok = true;
    const toml::node* kind = t->get("kind");
    if (!kind) {
      error(loc(*t), what + " has no 'kind' (\"cpu\" or \"cuda\")");
      ok = false;
    } else if (!kind->is_string()) {
      wrong_type(*kind, "'kind'", "a string (\"cpu\" or \"cuda\")");
      ok = false;
    } else {
      const std::string& k = kind->as_string()->get();
      if (k == "cpu") d.kind = device_kind::cpu;
      else if (k == "cuda") d.kind = device_kind::cuda;
      else {
        // 'gpu' is one edit from 'cpu', but a GPU is what the user meant.
        const std::string lk = lower(k);
        std::string hint = (lk.rfind("gpu", 0) == 0 || lk.rfind("cuda", 0) == 0 ||
                            lk == "nvidia")
                               ? "; did you mean 'cuda'?"
                               : did_you_mean(k, kinds);
        error(loc(*kind), "unknown device kind " + quote(k) + "; expected 'cpu' or 'cuda'" + hint);
        ok = false;
      }
    }
    d.index = static_cast<int>(s.get_int("index", 0));
    d.threads = static_cast<int>(s.get_int("threads", 0));
    d.memory_bytes = static_cast<uint64_t>(s.get_int("memory", 0));
    d.profile = s.get_string("profile");
    d.speed = s.get_number("speed", 1.0);
    if (ok && d.kind == device_kind::cuda) {
      if (const toml::node* th = t->get("threads")) {
        error(loc(*th), "'threads' applies to cpu devices only; " + what +
                            " is a cuda device (give the node a cpu device for host threads)");
        ok = false;
      }
    }
    if (!ok || errors_.size() != errors_before) continue;
    const toml::node* idx = t->get("index");
    for (const auto& prev : seen) {
      if (prev.kind == d.kind && prev.index == d.index) {
        error(idx ? loc(*idx) : d.where,
              node_what + " already has a " + to_string(d.kind) + " device with index " +
                  std::to_string(d.index) + " (line " + std::to_string(prev.where.line) +
                  "); give each " + to_string(d.kind) + " device its own 'index'");
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    seen.push_back({d.kind, d.index, d.where});
    node.devices.push_back(std::move(d));
  }
}

void validator::read_nodes(const toml::node* n, const toml::key* k, cluster& c) {
  if (!n) {
    error({}, "missing [[nodes]]; a topology needs at least one node (the first is the head)");
    return;
  }
  const toml::array* arr = n->as_array();
  if (!arr) {
    std::string hint = n->is_table() ? "; write [[nodes]] (double brackets) once per node" : "";
    error(loc(k->source()),
          std::string("'nodes' must be an array of tables, found ") + type_name(*n) + hint);
    return;
  }
  if (arr->empty()) {
    error(loc(*n), "'nodes' is empty; a topology needs at least one node (the first is the head)");
    return;
  }
  std::map<std::string, source_loc, std::less<>> names;          // name -> its value's loc
  std::map<std::string, std::pair<std::string, source_loc>> addrs;  // host:port -> node, loc
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    const std::string what = "[[nodes]] #" + std::to_string(i + 1);
    const toml::table* t = e.as_table();
    if (!t) {
      wrong_type(e, what, "a table");
      continue;
    }
    settings s;
    const size_t errors_before = errors_.size();
    check_table(t, loc(*t), what, node_specs(), node_extra, section::node, s);
    node_spec node;
    node.where = loc(*t);
    bool ok = errors_.size() == errors_before;

    if (const toml::node* name = t->get("name"); name && name->is_string()) {
      const std::string& nm = name->as_string()->get();
      node_names_.push_back(nm);
      if (!valid_name(nm)) {
        error(loc(*name), "node name " + quote(nm) +
                              (nm.empty() ? " is empty" : " is not allowed") +
                              "; use letters, digits, '_', '.' and '-'");
        ok = false;
      } else if (auto it = names.find(nm); it != names.end()) {
        error(loc(*name), "duplicate node name " + quote(nm) + "; the first is at line " +
                              std::to_string(it->second.line));
        ok = false;
      } else {
        names.emplace(nm, loc(*name));
      }
    }
    if (const toml::node* host = t->get("host"); host && host->is_string()) {
      const std::string& h = host->as_string()->get();
      if (h.empty()) {
        error(loc(*host), "'host' is empty; give a host name or an IP address");
        ok = false;
      } else if (h.find_first_of(" \t\r\n") != std::string::npos) {
        error(loc(*host), "'host' " + quote(h) + " contains whitespace");
        ok = false;
      }
    }
    node.name = s.get_string("name");
    node.host = s.get_string("host");
    node.port = static_cast<uint16_t>(s.get_int("port", 0));
    if (const toml::node* cpus = t->get("cpus"); cpus && cpus->is_string()) {
      auto list = parse_cpu_list(cpus->as_string()->get());
      if (!list) {
        error(loc(*cpus), "'cpus': " + list.error().message());
        ok = false;
      } else {
        node.cpus = std::move(*list);
      }
    }

    // host:port must be unique; only compare addresses that are themselves valid.
    if (s.contains("host") && !node.host.empty() && s.contains("port")) {
      const std::string host_key = lower(node.host);
      const std::string key = host_key + ":" + std::to_string(node.port);
      const std::string shown = (node.host.find(':') != std::string::npos
                                     ? "[" + node.host + "]"
                                     : node.host) +
                                ":" + std::to_string(node.port);
      const toml::node* port = t->get("port");
      if (auto it = addrs.find(key); it != addrs.end()) {
        error(loc(*port), "address " + shown + " is already used by " + it->second.first +
                              " (line " + std::to_string(it->second.second.line) +
                              "); each node needs its own host:port");
        ok = false;
      } else {
        addrs.emplace(key, std::make_pair(node.name.empty() ? what : "node '" + node.name + "'",
                                          loc(*port)));
      }
    }

    const std::string node_what =
        s.contains("name") && valid_name(node.name) ? "node '" + node.name + "'" : what;
    if (const toml::node* devs = t->get("devices")) {
      const size_t before = errors_.size();
      read_devices(*devs, node_what, node);
      if (errors_.size() != before) ok = false;
    } else {
      device_spec cpu;
      cpu.where = node.where;
      node.devices.push_back(cpu);
    }
    if (ok) c.nodes.push_back(std::move(node));
  }
  // metrics_port P: node i serves /metrics at P + i, which must be a port no
  // node of the same host listens on.
  if (const int p = c.runtime.metrics_port; p > 0) {
    for (std::size_t i = 0; i < c.nodes.size(); ++i) {
      const auto& node = c.nodes[i];
      const long mp = long(p) + long(i);
      if (mp > 65535) {
        error(node.where, "node '" + node.name + "' would serve /metrics at port " + std::to_string(mp) +
                              " (metrics_port " + std::to_string(p) + " + its index " + std::to_string(i) +
                              "), past 65535; lower metrics_port");
        continue;
      }
      if (auto it = addrs.find(lower(node.host) + ":" + std::to_string(mp)); it != addrs.end())
        error(node.where, "node '" + node.name + "' would serve /metrics at " + node.host + ":" +
                              std::to_string(mp) + " (metrics_port " + std::to_string(p) + " + its index " +
                              std::to_string(i) + "), the address of " + it->second.first +
                              "; choose a metrics_port clear of the nodes' ports");
    }
  }
}

// ---- [job]

void validator::read_job(const toml::node* n, const toml::key* k, cluster& c) {
  if (!n) {
    error({}, "missing [job] table; a topology needs [cluster], [[nodes]] and [job]");
    return;
  }
  const toml::table* t = n->as_table();
  if (!t) {
    std::string hint = n->is_array_of_tables() ? "; write [job] (single brackets)" : "";
    error(loc(k->source()), std::string("'job' must be a table ([job]), found ") + type_name(*n) + hint);
    return;
  }
  c.job.where = loc(*t);
  std::vector<std::string> known_kinds;
  for (const auto& j : cat_.job_kinds) known_kinds.push_back(j.name);
  const toml::node* kind = t->get("kind");
  if (!kind) {
    error(loc(*t), "[job] has no 'kind'" +
                       (known_kinds.empty() ? std::string()
                                            : " (one of " + list_quoted(known_kinds) + ")"));
    return;
  }
  if (!kind->is_string()) {
    wrong_type(*kind, "'kind'", "a string");
    return;
  }
  const std::string& name = kind->as_string()->get();
  const type_spec* ts = cat_.find_job_kind(name);
  if (!ts) {
    std::string msg = "unknown job kind " + quote(name);
    std::string hint = did_you_mean(name, known_kinds);
    if (!hint.empty()) msg += hint;
    else if (known_kinds.empty()) msg += "; this build knows no job kinds";
    else msg += "; known kinds: " + list_quoted(known_kinds, ", ");
    error(loc(*kind), msg);
    return;
  }
  c.job.kind = name;
  check_table(t, loc(*t), "[job] (kind '" + name + "')", ts->keys, {"kind"}, section::job,
              c.job.params);
}

// ---- [[actors]]

void validator::read_actors(const toml::node& n, const toml::key& k, cluster& c) {
  const toml::array* arr = n.as_array();
  if (!arr) {
    std::string hint = n.is_table() ? "; write [[actors]] (double brackets) once per actor" : "";
    error(loc(k.source()),
          std::string("'actors' must be an array of tables, found ") + type_name(n) + hint);
    return;
  }
  std::vector<std::string> known_types;
  for (const auto& a : cat_.actor_types) known_types.push_back(a.name);
  std::map<std::string, source_loc, std::less<>> names;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    const std::string what = "[[actors]] #" + std::to_string(i + 1);
    const toml::table* t = e.as_table();
    if (!t) {
      wrong_type(e, what, "a table");
      continue;
    }
    settings s;
    const size_t errors_before = errors_.size();
    check_table(t, loc(*t), what, actor_specs(), actor_extra, section::actor, s);
    actor_spec a;
    a.where = loc(*t);
    a.name = s.get_string("name");
    a.type = s.get_string("type");
    a.node = s.get_string("node");

    if (const toml::node* name = t->get("name"); name && name->is_string()) {
      if (!valid_name(a.name)) {
        error(loc(*name), "actor name " + quote(a.name) +
                              (a.name.empty() ? " is empty" : " is not allowed") +
                              "; use letters, digits, '_', '.' and '-'");
      } else if (auto it = names.find(a.name); it != names.end()) {
        error(loc(*name), "duplicate actor name " + quote(a.name) + "; the first is at line " +
                              std::to_string(it->second.line));
      } else {
        names.emplace(a.name, loc(*name));
      }
    }
    if (const toml::node* node = t->get("node"); node && node->is_string()) {
      if (std::find(node_names_.begin(), node_names_.end(), a.node) == node_names_.end()) {
        std::string hint = did_you_mean(a.node, node_names_);
        if (hint.empty() && !node_names_.empty())
          hint = "; nodes: " + list_quoted(node_names_, ", ");
        error(loc(*node), "actor " + (a.name.empty() ? what : quote(a.name)) +
                              " is placed on node " + quote(a.node) +
                              ", which is not in [[nodes]]" + hint);
      }
    }
    const type_spec* ts = nullptr;
    if (const toml::node* type = t->get("type"); type && type->is_string()) {
      ts = cat_.find_actor_type(a.type);
      if (!ts) {
        std::string msg = "unknown actor type " + quote(a.type);
        std::string hint = did_you_mean(a.type, known_types);
        if (!hint.empty()) msg += hint;
        else if (known_types.empty()) msg += "; this build knows no actor types";
        else msg += "; known types: " + list_quoted(known_types, ", ");
        error(loc(*type), msg);
      }
    }
    const toml::node* args = t->get("args");
    if (args && !args->is_table()) {
      wrong_type(*args, "'args' of " + what, "a table (args = { ... } or [actors.args])");
    } else if (ts) {
      const toml::table* at = args ? args->as_table() : nullptr;
      check_table(at, at ? loc(*at) : a.where,
                  "args of " + what + " (type '" + a.type + "')", ts->keys, {}, section::args,
                  a.args);
    }
    if (errors_.size() == errors_before) c.actors.push_back(std::move(a));
  }
}

cluster validator::run(const toml::table& root) {
  cluster c;
  for (auto&& [k, v] : root) {
    const std::string_view name = k.str();
    if (std::find(top_level_keys.begin(), top_level_keys.end(), name) != top_level_keys.end())
      continue;
    std::string msg;
    if (v.is_table()) {
      msg = "unknown table [" + std::string(name) + "]";
      if (auto m = closest_match(name, top_level_keys)) msg += "; did you mean [" + *m + "]?";
    } else if (v.is_array_of_tables()) {
      msg = "unknown table [[" + std::string(name) + "]]";
      if (auto m = closest_match(name, top_level_keys)) msg += "; did you mean [[" + *m + "]]?";
    } else {
      msg = "unknown top-level key " + quote(name);
      std::string where = belongs_elsewhere(name, section::args);
      if (!where.empty()) msg += where + " (keys above the first [table] header are top-level)";
      else msg += "; a topology has only [cluster], [[nodes]], [job] and [[actors]]";
    }
    if (msg.rfind("unknown table", 0) == 0 && msg.find("did you mean") == std::string::npos)
      msg += "; a topology has only [cluster], [[nodes]], [job] and [[actors]]";
    error(loc(k.source()), msg);
  }
  auto find = [&](std::string_view key) -> std::pair<const toml::key*, const toml::node*> {
    auto it = root.find(key);
    if (it == root.end()) return {nullptr, nullptr};
    return {&it->first, &it->second};
  };
  auto [ck, cn] = find("cluster");
  read_cluster(cn, ck, c);
  auto [nk, nn] = find("nodes");
  read_nodes(nn, nk, c);
  auto [jk, jn] = find("job");
  read_job(jn, jk, c);
  auto [ak, an] = find("actors");
  if (an) read_actors(*an, *ak, c);
  return c;
}

}  // namespace

cluster check_document(const toml::table& root, const catalog& cat, const std::string& file,
                       const fs::path& base_dir, std::vector<diagnostic>& errors) {
  validator v(cat, file, base_dir);
  cluster c = v.run(root);
  errors = v.take_errors();
  return c;
}

}  // namespace hetflow::topology::detail
