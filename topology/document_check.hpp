// Internal to topology/ (includes toml++; no public header may include this):
// the semantic pass over a parsed topology document.
#pragma once

#include <filesystem>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "topology/catalog.hpp"
#include "topology/cluster.hpp"
#include "topology/parser.hpp"

namespace hetflow::topology::detail {

inline source_loc to_source_loc(const toml::source_region& r) {
  return {r.begin.line, r.begin.column};
}

// Checks `root` against the format and `cat`; appends every problem to `errors`
// (unsorted) and returns the cluster built from the valid parts. `base_dir`
// (absolute) resolves relative paths. The caller sets cluster::file and
// content_hash, and discards the cluster when `errors` is not empty.
cluster check_document(const toml::table& root, const catalog& cat, const std::string& file,
                       const std::filesystem::path& base_dir, std::vector<diagnostic>& errors);

}  // namespace hetflow::topology::detail
