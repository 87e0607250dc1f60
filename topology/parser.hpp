// parser: topology file (TOML) -> validated `cluster`, or every problem found.
//
// Reports all problems it can find in one pass (unknown keys with "did you mean",
// wrong types, out-of-range values, duplicates, unknown catalog names, missing
// files), each with the 1-based line:col of the offending key or value. A TOML
// syntax error stops the check (one diagnostic). So do problems with the file
// itself — missing, unreadable, a directory or other non-regular file, larger
// than 16 MiB, empty, NUL bytes, invalid UTF-8 — each one diagnostic.
//
// Thread-safe: no shared state; `cat` is only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "topology/catalog.hpp"
#include "topology/cluster.hpp"
#include "topology/units.hpp"

namespace hetflow::topology {

// The largest topology file we read; bigger files are refused before reading.
inline constexpr uint64_t max_topology_bytes = 16ull << 20;

struct diagnostic {
  std::string file;  // as the user gave it
  source_loc where;  // {0,0} = about the whole file (printed as 1:1)
  std::string message;
};

// "FILE:LINE:COL: error: message". A diagnostic about the whole file (where =
// {0,0}) prints as FILE:1:1 so editors and `grep -n`-style tools can jump to it.
std::string format(const diagnostic& d);

struct parse_result {
  std::optional<cluster> model;  // set iff errors is empty
  std::vector<diagnostic> errors;  // sorted by line, then column
  bool ok() const { return model.has_value() && errors.empty(); }
};

// Reads `file` (size-checked first, never blocks on FIFOs/devices) and parses it.
parse_result load_topology(const std::filesystem::path& file, const catalog& cat);

// Parses `text` as if it were the contents of `file_for_messages`: that path
// appears in diagnostics, its folder is the base for relative paths
// (plugins, path keys), and its absolute form becomes cluster::file.
parse_result parse_topology(std::string_view text, const std::filesystem::path& file_for_messages,
                            const catalog& cat);

// One element of [cluster] plugins, read ahead of the check (scan_plugins).
struct plugin_entry {
  std::string text;            // as written
  std::filesystem::path path;  // absolute, lexically normal
  source_loc where;            // of the element
};

// The [cluster] plugins of `file`, read before load_topology: plugins extend
// the catalog the file is then checked against (actors/plugin_loader.hpp).
// Lenient and quiet: a file that load_topology refuses (unreadable, too large,
// not UTF-8, bad TOML), a `plugins` that is not an array, and elements that are
// not strings or name no regular file give no entry; load_topology reports them.
std::vector<plugin_entry> scan_plugins(const std::filesystem::path& file);

// FNV-1a 64-bit over raw bytes (cluster::content_hash: nodes compare it at hello).
uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept;

}  // namespace hetflow::topology
