// libFuzzer target: topology file text -> parse_topology (byte checks, TOML,
// the whole document check) against a catalog with one job kind per key type.
//
// Contract: a validated cluster, or one or more diagnostics sorted by
// position, each with a message and a position inside the text; never a
// crash, a hang or an exception. The real catalog comes from the actor
// registry (CAF), so this uses the topology tests' catalog: it has every key
// type (sizes, durations, lists, paths, tables with shorthands and aliases).
//
// Paths in the file resolve against /nonexistent-hetflow-fuzz/ (only stat()
// is ever called on them).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "test/fuzz/fuzz_check.hpp"
#include "test/topology/test_catalog.hpp"
#include "topology/parser.hpp"

namespace ht = hetflow::topology;

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  static const ht::catalog cat = ht::test::make_test_catalog();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ht::parse_result r = ht::parse_topology(text, "/nonexistent-hetflow-fuzz/fuzz.toml", cat);

  FUZZ_CHECK(r.model.has_value() == r.errors.empty(), "a model iff no diagnostics");
  const auto lines = uint32_t(std::count(text.begin(), text.end(), '\n')) + 1;
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    const ht::diagnostic& d = r.errors[i];
    FUZZ_CHECK(!d.message.empty(), "every diagnostic says something");
    FUZZ_CHECK(d.where.line <= lines, "diagnostic line inside the file");
    FUZZ_CHECK(d.file == "/nonexistent-hetflow-fuzz/fuzz.toml", "diagnostic names the file");
    if (i > 0) {
      const auto& p = r.errors[i - 1].where;
      FUZZ_CHECK(p.line < d.where.line || (p.line == d.where.line && p.column <= d.where.column),
                 "diagnostics sorted by position");
    }
    FUZZ_CHECK(!ht::format(d).empty(), "format() prints");
  }
  if (r.model) {
    const ht::cluster& c = *r.model;
    FUZZ_CHECK(!c.nodes.empty(), "a valid cluster has nodes");
    FUZZ_CHECK(c.content_hash == ht::fnv1a64(std::as_bytes(std::span<const char>(text.data(), text.size()))),
               "content hash of the text");
    for (std::size_t i = 0; i < c.nodes.size(); ++i)
      FUZZ_CHECK(c.node_index(c.nodes[i].name) == int(i), "node names are unique");
    for (const auto& a : c.actors) FUZZ_CHECK(c.find_node(a.node) != nullptr, "actors sit on known nodes");
  }
  return 0;
}
