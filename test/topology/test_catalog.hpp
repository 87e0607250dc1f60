// A small catalog for the topology tests: one job kind per key type, and three
// actor types. Not the real registry (actors/ builds that one).
#pragma once

#include "topology/catalog.hpp"

namespace hetflow::topology::test {

inline key_spec key(std::string name, key_type type, bool required = false,
                    std::optional<setting_value> def = std::nullopt,
                    std::optional<double> min = std::nullopt,
                    std::optional<double> max = std::nullopt,
                    std::vector<std::string> one_of = {}) {
  key_spec k;
  k.name = std::move(name);
  k.type = type;
  k.required = required;
  k.default_value = std::move(def);
  k.min = min;
  k.max = max;
  k.one_of = std::move(one_of);
  k.help = "test key";
  return k;
}

inline catalog make_test_catalog() {
  catalog c;
  type_spec skeleton;
  skeleton.name = "skeleton";
  skeleton.help = "move tensors through producer -> transformer -> checker";
  skeleton.keys = {
      key("tensors", key_type::integer, true, std::nullopt, 1),
      key("tensor_bytes", key_type::size, false, int64_t{1} << 20, 1),
      key("mode", key_type::string, false, std::string("sum"), std::nullopt, std::nullopt,
          {"sum", "copy"}),
      key("ratio", key_type::number, false, 0.5, 0, 1),
      key("timeout", key_type::duration, false, 5.0, 0.001),
      key("verbose", key_type::boolean, false, false),
      key("tags", key_type::string_list),
      key("chunk_sizes", key_type::size_list, false, std::nullopt, 1),
      key("data", key_type::path),
      key("inputs", key_type::path_list),
      key("out_dir", key_type::path, false, std::string("out")),
  };
  type_spec train;
  train.name = "train";
  // A table key with a shorthand, fields tied to the mode, and flat aliases
  // (the preprocess job's `categorical`).
  key_spec categorical = key("categorical", key_type::table);
  categorical.shorthand = "mode";
  categorical.fields = {key("mode", key_type::string, false, std::string("vocab"), std::nullopt, std::nullopt,
                            {"vocab", "hash"}),
                        key("min_count", key_type::integer, false, std::nullopt, 1),
                        key("range", key_type::integer, false, std::nullopt, 1, 2147483647.0)};
  categorical.fields[1].only_with = {"mode", "vocab"};
  categorical.fields[1].alias_of = "min_count";
  categorical.fields[2].only_with = {"mode", "hash"};
  categorical.fields[2].alias_of = "hash_range";
  train.keys = {key("model", key_type::string, true), categorical,
                key("min_count", key_type::integer, false, int64_t{1}, 1),
                key("hash_range", key_type::integer, false, int64_t{1} << 24, 1)};
  c.job_kinds = {skeleton, train};

  type_spec producer;
  producer.name = "producer";
  producer.keys = {key("count", key_type::integer, true, std::nullopt, 1),
                   key("bytes", key_type::size, false, int64_t{4096})};
  type_spec transformer;
  transformer.name = "transformer";
  transformer.keys = {key("factor", key_type::number, false, 1.0)};
  type_spec checker;
  checker.name = "checker";
  checker.keys = {key("expect", key_type::integer, false, int64_t{0}, 0)};
  c.actor_types = {producer, transformer, checker};
  return c;
}

}  // namespace hetflow::topology::test
