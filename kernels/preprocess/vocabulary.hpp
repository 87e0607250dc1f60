// vocabulary: categorical string -> contiguous id, per column, and the hash
// mode's id function.
//
// Id order (vocab mode): the kept strings of a column sorted by their bytes
// (memcmp order; the empty string, i.e. the missing value, sorts first when
// kept) get ids 0 .. K-1; every string seen fewer than min_count times maps to
// the OOV id K. Sorting makes the ids independent of how the input was cut
// into shards and of the order counts arrive in.
//
// Files (next to the part files), one per column c = 0..25 (C1..C26):
//   vocab-CC.tsv   line i (0-based) = the string with id i, '\t', its count;
//                  the OOV id is the number of lines. Strings never hold '\t'
//                  or '\n' (they are fields of a tab-separated line), so the
//                  file is plain text; the empty string is an empty first field.
//
// Hash mode: id = FNV-1a 64 of the string's bytes mod range (same function for
// every column; the empty string hashes to the FNV offset basis).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/criteo_record.hpp"
#include "kernels/preprocess/string_key_map.hpp"

namespace hetflow::kernels::preprocess {

inline uint64_t fnv1a64(std::string_view s) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline int32_t hash_id(std::string_view s, uint64_t range) noexcept {
  return static_cast<int32_t>(fnv1a64(s) % range);
}

class column_vocabulary {
public:
  // Appends the next id (strings must arrive in id order, each once).
  void add(std::string_view s) { ids_[s] = size_++; }
  int32_t lookup(std::string_view s) const noexcept {
    const int32_t* p = ids_.find(s);
    return p ? *p : size_;
  }
  int32_t lookup(const small_key& k) const noexcept {
    const int32_t* p = ids_.find(k);
    return p ? *p : size_;
  }
  void prefetch(const small_key& k) const noexcept { ids_.prefetch(k); }
  int32_t oov_id() const noexcept { return size_; }
  std::size_t memory_bytes() const noexcept { return ids_.memory_bytes(); }

private:
  string_key_map<int32_t> ids_;
  int32_t size_ = 0;
};

struct vocabulary {
  std::array<column_vocabulary, sparse_columns> columns;
};

struct column_merge_stats {
  uint64_t distinct = 0;  // strings seen at all
  uint64_t kept = 0;      // count >= min_count (= the OOV id)
};

// Merges the sorted count streams of one column (from every shard) and calls
// keep(s, total_count) for each kept string in id order. Memory: one entry per
// input stream.
template <class Keep>
expected<column_merge_stats> merge_column(std::vector<count_stream*> inputs, uint64_t min_count,
                                          Keep&& keep) {
  auto m = merged_stream(std::move(inputs));
  column_merge_stats st;
  std::string_view s;
  uint64_t c;
  while (m->next(s, c)) {
    ++st.distinct;
    if (c >= min_count) {
      ++st.kept;
      if (st.kept > static_cast<uint64_t>(INT32_MAX))
        return make_error(errc::out_of_memory, "a column has more than 2^31-1 kept strings; use hash mode");
      keep(s, c);
    }
  }
  if (auto e = m->error(); !e.ok()) return e;
  return st;
}

std::string vocab_file_name(int column);  // "vocab-00.tsv" .. "vocab-25.tsv"

// Kept strings in id order as wire chunks: records `u16 length | bytes`.
void append_vocab_record(std::vector<char>& chunk, std::string_view s);
// Adds a chunk's strings to `col`; false if the chunk is corrupt.
bool add_vocab_chunk(column_vocabulary& col, const std::vector<char>& chunk);

// Reads vocab-CC.tsv files back (for tools and tests).
expected<vocabulary> read_vocabulary(const std::string& dir);

}  // namespace hetflow::kernels::preprocess
