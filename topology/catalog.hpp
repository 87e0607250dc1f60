// catalog: the names a topology file may use, and the keys each one takes.
//
// Plain data. The actor-type registry (actors/registry.hpp) produces one at
// start-up (built-in types plus plugins); `validate` and the node runtime
// parse against the same catalog, so "unknown actor type" means the same
// thing everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/settings.hpp"

namespace hetflow::topology {

enum class key_type {
  boolean,      // true / false
  integer,      // TOML integer
  number,       // TOML integer or float -> double
  string,
  size,         // "4GiB", "512 MiB", "64KiB", "100B", or a plain integer of bytes
  duration,     // "60s", "200ms", "2m", or a number of seconds
  string_list,  // array of strings
  path,         // string; relative to the topology file's folder; must exist
  path_list,    // array of paths; each must exist
  size_list,    // array of sizes
};

const char* to_string(key_type t) noexcept;

struct key_spec {
  std::string name;
  key_type type = key_type::string;
  bool required = false;
  std::optional<setting_value> default_value;  // used when absent
  std::string help;
  // Inclusive bounds for integer/number/size/duration (in bytes / seconds).
  std::optional<double> min;
  std::optional<double> max;
  // For string keys: the allowed values (empty = any).
  std::vector<std::string> one_of;
};

// A job kind (`[job] kind = "..."`) or an actor type (`[[actors]] type = "..."`).
struct type_spec {
  std::string name;
  std::string help;
  std::vector<key_spec> keys;
};

struct catalog {
  std::vector<type_spec> job_kinds;
  std::vector<type_spec> actor_types;

  const type_spec* find_job_kind(std::string_view name) const;
  const type_spec* find_actor_type(std::string_view name) const;
};

}  // namespace hetflow::topology
