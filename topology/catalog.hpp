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
  table,        // inline table { k = v, ... } checked against `fields`; stored flattened
                // as "key.field" (settings::field_key). With a `shorthand` field, a
                // plain value v means { shorthand = v }.
};

const char* to_string(key_type t) noexcept;

struct key_spec {
  // Spelled out (not an aggregate) so the many positional key_spec{...} of the
  // built-in types keep compiling, warning-free, as fields are added below.
  key_spec() = default;
  key_spec(std::string name_, key_type type_, bool required_ = false,
           std::optional<setting_value> default_value_ = std::nullopt, std::string help_ = {},
           std::optional<double> min_ = std::nullopt, std::optional<double> max_ = std::nullopt,
           std::vector<std::string> one_of_ = {})
      : name(std::move(name_)), type(type_), required(required_), default_value(std::move(default_value_)),
        help(std::move(help_)), min(min_), max(max_), one_of(std::move(one_of_)) {}

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

  // Table keys: the sub-keys, and the one a plain value stands for ("" = none).
  std::vector<key_spec> fields;
  std::string shorthand;
  // Sub-keys: allowed only when the sibling string field only_with[0] has the
  // value only_with[1] (e.g. {"mode", "hash"}); empty = always.
  std::vector<std::string> only_with;
  // Sub-keys: the flat key of the enclosing table that says the same thing
  // (kept for older files); giving both is an error.
  std::string alias_of;
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
