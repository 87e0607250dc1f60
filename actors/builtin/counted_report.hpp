// counted_report: what a preprocess shard tells the vocabulary actor when
// its pass 1 is done (actors/builtin/preprocess.cpp's ppcounted), and its
// wire form. No CAF: the unit test round-trips it.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/preprocess/criteo_record.hpp"

namespace hetflow::actors::builtin {

// A shard's report once its pass 1 is done (ppcounted), for pp_vocab: what
// merging each column costs, which can merge by hashing, and what such a
// merge on its node must fit (kernels::preprocess::fit_hashed_merge). On the
// wire, little-endian: 26 x u64 sizes, u32 hashable, u64 cap, u64 table
// bytes, u32 in_flight. decode: nullopt for another length, in_flight 0 or
// a hashable bit past the last column.
struct counted_report {
  static constexpr int columns = kernels::preprocess::sparse_columns;
  std::array<uint64_t, columns> sizes{};  // entries per column (shard_counts::column_size)
  uint32_t hashable = 0;                  // bit c: shard_counts::hashable(c)
  uint64_t cap = 0;                       // the memory cap pass 1 kept to
  uint64_t table_bytes = 0;               // its count tables, at their peak
  uint32_t in_flight = 1;                 // columns its node's merger takes at once

  static constexpr std::size_t wire_bytes = columns * 8 + 4 + 8 + 8 + 4;
  std::vector<char> encode() const {
    std::vector<char> b(wire_bytes);
    char* p = b.data();
    auto put = [&p](const void* v, std::size_t n) {
      std::memcpy(p, v, n);
      p += n;
    };
    put(sizes.data(), sizeof sizes);
    put(&hashable, 4);
    put(&cap, 8);
    put(&table_bytes, 8);
    put(&in_flight, 4);
    return b;
  }
  static std::optional<counted_report> decode(const std::vector<char>& b) {
    if (b.size() != wire_bytes) return std::nullopt;
    counted_report report;
    const char* p = b.data();
    auto get = [&p](void* v, std::size_t n) {
      std::memcpy(v, p, n);
      p += n;
    };
    get(report.sizes.data(), sizeof report.sizes);
    get(&report.hashable, 4);
    get(&report.cap, 8);
    get(&report.table_bytes, 8);
    get(&report.in_flight, 4);
    if (report.in_flight == 0 || (report.hashable >> columns) != 0) return std::nullopt;
    return report;
  }
};

}  // namespace hetflow::actors::builtin
