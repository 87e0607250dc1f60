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

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/criteo_record.hpp"
#include "kernels/preprocess/hex_key.hpp"
#include "kernels/preprocess/huge_memory.hpp"
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

// h % range without a division (Lemire, Kaser & Kurz, "Faster remainder by
// direct computation", 2019): M = ceil(2^128 / d); h % d = ((M * h mod 2^128)
// * d) >> 128. Exact for every 64-bit h and 1 <= d < 2^32 (hash_range is at
// most 2^31 - 1); the hash mode's hot loop does 26 of these per row.
class range_reducer {
public:
  explicit range_reducer(uint64_t d) noexcept : d_(d), m_(~__uint128_t{0} / d + 1) {}
  uint64_t operator()(uint64_t h) const noexcept {
    __uint128_t low = m_ * h;
    __uint128_t bottom = (static_cast<__uint128_t>(static_cast<uint64_t>(low)) * d_) >> 64;
    __uint128_t top = static_cast<__uint128_t>(static_cast<uint64_t>(low >> 64)) * d_;
    return static_cast<uint64_t>((bottom + top) >> 64);
  }

private:
  uint64_t d_;
  __uint128_t m_;
};

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
  // A merge by count threshold (merge_candidates) sees only the strings that
  // could be kept: `distinct` is then an estimate from the shards' sketches
  // (about 1% off), never below the strings it saw.
  bool distinct_estimated = false;
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

// merge_column that also says which id each input's entries got: assign(i,
// id) is called for input i's entries in that input's order, id = -1 for a
// string rarer than min_count (the OOV id is the returned `kept`, known only
// at the end). Pass 2 of a shard maps its local ids through these. The
// strings an input dropped (count_stream::dropped()) count as distinct.
template <class Keep, class Assign>
expected<column_merge_stats> merge_column_ids(const std::vector<count_stream*>& inputs, uint64_t min_count,
                                              Keep&& keep, Assign&& assign) {
  column_merge_stats st;
  // One merged entry: its id (-1: rarer than min_count). `spell` gives its
  // string, asked for only when it is kept.
  auto take = [&](auto&& spell, uint64_t c, int32_t& id) -> status {
    ++st.distinct;
    id = -1;
    if (c >= min_count) {
      if (st.kept >= static_cast<uint64_t>(INT32_MAX))
        return make_error(errc::out_of_memory, "a column has more than 2^31-1 kept strings; use hash mode");
      id = static_cast<int32_t>(st.kept++);
      keep(spell(), c);
    }
    return {};
  };
  const std::size_t n = inputs.size();
  if (n >= 1 && n <= 8) {
    // Few inputs (one per shard: usually a handful): the smallest head by a
    // linear scan, no heap and no copies. A head is either its input's view
    // (valid until that input's next() or next_hex(), called only after the
    // merged entry has been taken) or a hex value from a batch the input
    // handed out (next_hex): two hex heads compare as integers (their
    // numeric order is their strings' order), anything else as strings, a
    // hex value spelled out into the head's own buffer.
    constexpr std::size_t batch = 4096;
    struct head {
      std::string_view s;
      uint64_t count = 0;
      bool live = false;
      bool hex = false;
      uint32_t value = 0;
      std::size_t pos = 0, len = 0;  // the batch: entries [pos, len) still to come
      std::vector<uint32_t> values;
      std::vector<uint64_t> counts;
      char buf[8];
    };
    head cur[8];
    auto advance = [&](std::size_t i) {
      head& h = cur[i];
      if (h.pos == h.len) {
        if (h.values.empty()) {
          h.values.resize(batch);
          h.counts.resize(batch);
        }
        h.len = inputs[i]->next_hex(h.values.data(), h.counts.data(), batch);
        h.pos = 0;
      }
      if (h.pos < h.len) {
        h.hex = h.live = true;
        h.value = h.values[h.pos];
        h.count = h.counts[h.pos++];
        return;
      }
      h.hex = false;
      h.live = inputs[i]->next(h.s, h.count);
    };
    auto text = [](head& h) -> std::string_view {
      if (!h.hex) return h.s;
      hex8_chars(h.value, h.buf);
      return std::string_view(h.buf, 8);
    };
    auto less = [&](head& a, head& b) {
      return a.hex && b.hex ? a.value < b.value : key_compare(text(a), text(b)) < 0;
    };
    auto equal = [&](head& a, head& b) {
      return a.hex && b.hex ? a.value == b.value : key_equal(text(a), text(b));
    };
    for (std::size_t i = 0; i < n; ++i) advance(i);
    std::size_t from[8];
    for (;;) {
      std::size_t m = n;
      for (std::size_t i = 0; i < n; ++i)
        if (cur[i].live && (m == n || less(cur[i], cur[m]))) m = i;
      if (m == n) break;
      std::size_t k = 0;
      uint64_t total = 0;
      for (std::size_t i = m; i < n; ++i)
        if (cur[i].live && (i == m || equal(cur[i], cur[m]))) {
          total += cur[i].count;
          from[k++] = i;
        }
      int32_t id;
      if (auto e = take([&] { return text(cur[m]); }, total, id); !e.ok()) return e;
      for (std::size_t j = 0; j < k; ++j) {
        assign(from[j], id);
        advance(from[j]);
      }
    }
  } else if (n > 8) {
    struct head {
      std::string s;  // a copy: the input's view dies on its next()
      uint64_t count = 0;
    };
    std::vector<head> cur(n);
    auto greater = [&](std::size_t a, std::size_t b) {
      int c = key_compare(cur[a].s, cur[b].s);
      return c != 0 ? c > 0 : a > b;
    };
    std::vector<std::size_t> heap;
    auto advance = [&](std::size_t i) {
      std::string_view s;
      uint64_t c;
      if (inputs[i]->next(s, c)) {
        cur[i].s.assign(s);
        cur[i].count = c;
        heap.push_back(i);
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    };
    for (std::size_t i = 0; i < n; ++i) advance(i);
    std::string out;
    std::vector<std::size_t> from;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), greater);
      std::size_t i = heap.back();
      heap.pop_back();
      out.swap(cur[i].s);
      uint64_t total = cur[i].count;
      from.assign(1, i);
      advance(i);
      while (!heap.empty() && key_equal(cur[heap.front()].s, out)) {
        std::pop_heap(heap.begin(), heap.end(), greater);
        std::size_t j = heap.back();
        heap.pop_back();
        total += cur[j].count;
        from.push_back(j);
        advance(j);
      }
      int32_t id;
      if (auto e = take([&] { return std::string_view(out); }, total, id); !e.ok()) return e;
      for (std::size_t j : from) assign(j, id);
    }
  }
  for (auto* in : inputs) {
    if (auto e = in->error(); !e.ok()) return e;
    st.distinct += in->dropped();
  }
  return st;
}

// The ids of one shard's column entries (merge_column_ids' assign) on the
// wire: OOV (-1) as 0, a kept id as id - (the previous kept id, -1 at first),
// which is >= 1 since a shard's strings arrive sorted and ids are sorted
// order; LEB128. Mostly one byte per entry.
void append_id(std::vector<char>& chunk, int32_t id, int32_t& prev_kept);
// Appends a chunk's ids to `out`; false if it is corrupt.
bool decode_ids(const std::vector<char>& chunk, int32_t& prev_kept, std::vector<int32_t>& out);

// A column's counts of one shard, for a merge by hashing
// (shard_counts::export_column gives them in increasing value order;
// merge_hashed takes any order): a column whose strings
// are all 8-hex-digit ids (as their values, hex_key.hpp) or the empty
// string - Criteo's. Entry order: the empty string first (when present),
// then keys[k]; the merge's ids come back in that order.
struct hex_column {
  bool has_empty = false;
  uint64_t empty_count = 0;
  big_vector<uint32_t> pairs;  // value, count, value, count, ...
  // shard_counts::export_candidates: a sketch (sketch_registers bytes) of
  // every value the shard counted, of which `pairs` holds only some.
  std::vector<uint8_t> sketch;
  std::size_t values() const noexcept { return pairs.size() / 2; }
  std::size_t entries() const noexcept { return values() + (has_empty ? 1 : 0); }
};
// The next wire chunk of h from entry `next` (advanced), at most max_bytes
// (and at least one entry, or the sketch); empty once every entry is out.
// Records, little-endian: u8 4 | u32 n | n bytes (the sketch: in the first
// chunk, at most once); u8 1 | u64 count (the empty string: first, at most once);
// u8 2 | u32 n | n x (u32 value | u32 count); values that increase (a
// sorted export) as u8 3 | u32 n | n x (LEB128 gap | LEB128 count), the gap
// being value - (the value before it in the column, this chunk's or an
// earlier one's) - 1, or the value itself for a column's first.
std::vector<char> next_hex_column_chunk(const hex_column& h, std::size_t& next, std::size_t max_bytes);
// Appends a chunk's entries to h; false if it is corrupt.
bool add_hex_column_chunk(hex_column& h, const std::vector<char>& chunk);
// The ids of a hex_column's entries on the wire, in entry order, when their
// kept ids do not increase (an unsorted export; sorted ones go as
// append_id's deltas): little-endian int32, OOV as -1.
void append_plain_ids(std::vector<char>& chunk, const int32_t* ids, std::size_t n);
// Whether the ids that are not OOV (>= 0) strictly increase: append_id can
// code them.
bool kept_ids_increase(const int32_t* ids, std::size_t n);
// Appends a chunk's ids; false if it is corrupt (its size, an id below -1).
bool decode_plain_ids(const std::vector<char>& chunk, std::vector<int32_t>& out);

// Which node merges each column: longest first onto the node with the least
// work so far (ties: the lower column, the lower node), so one node with the
// big columns does not hold up the rest. cost[c] = column c's entries over
// every shard, to which each column adds a fixed overhead (vocabulary.cpp);
// nodes >= 1. The same inputs give the same plan on every node.
// speed (one per node, > 0; else ignored): how fast each node worked in
// pass 1 (rows a second). A column then goes to the node that would finish
// it first (its work so far plus the column, over its speed): the vCPUs of a
// VM change speed for minutes at a time, and a node at 0.75x the other's
// speed, given half the entries, finished its merge ~20 ms after it (2
// nodes, 1M rows).
std::array<int, sparse_columns> assign_merge_columns(const std::array<uint64_t, sparse_columns>& cost, int nodes,
                                                     const std::vector<double>& speed = {});

// What a node holds while it merges columns by hashing, for
// fit_hashed_merge. Shards and nodes by index; a node merges on the table of
// the lowest-numbered shard it holds (merge_one_hashed's base).
struct merge_memory {
  std::vector<std::array<uint64_t, sparse_columns>> sizes;  // per shard: its entries of each column
  std::vector<int> holder;                                    // per shard: the node holding it
  std::vector<uint64_t> cap;                                  // per node: its memory cap (0: no limit)
  std::vector<uint64_t> held;                                 // per node: its shards' count tables, bytes
  std::vector<int> in_flight;                                 // per node: columns it merges at once
};
// The hashed columns (bit c of `hashed`) that keep merging by hashing when
// what each merging node holds must fit its cap; the others merge as sorted
// streams (pulled in chunks). Node m holds its own count tables (held[m]),
// the counts other nodes pushed it for every hashed column it merges (until
// it merges that column; pushed_entry_bytes an entry), and, for each of the
// in_flight[m] columns it merges at once, the table slots and id arrays of
// every entry of a shard other than its base (merge_entry_bytes an entry):
//   held[m] + sum_c pushed(c) * pushed_entry_bytes
//           + (the in_flight[m] largest) merged(c) * merge_entry_bytes  <=  cap[m].
// Columns are dropped largest (merged entries) first; a node whose own
// tables already take its cap merges none by hashing.
inline constexpr uint64_t pushed_entry_bytes = 8;
inline constexpr uint64_t merge_entry_bytes = 32;
uint32_t fit_hashed_merge(uint32_t hashed, const merge_memory& mm, const std::array<int, sparse_columns>& merger);

// ---- Merging a hashed column by a count threshold ----------------------------
//
// A string counted min_count (T) times over S shards was counted at least
// candidate_min_count(T, S) = ceil(T / S) times on one of them. Where that
// is 2 or more, the shards need not send every entry (at T = 3 on 2 shards
// of 1M Criteo rows, 74% of a shard's 1.14M entries were seen once there):
//   1. each shard sends its candidates: the entries it counted at least
//      ceil(T / S) times (shard_counts::export_candidates, sorted), and a
//      sketch of all its values;
//   2. the merger asks each shard for its counts of the other shards'
//      candidates it did not send (candidate_queries); the shard answers
//      with the ones it counted (its hits: shard_counts::answer_queries);
//   3. every candidate's total is then exact: merge_candidates keeps those
//      counted T times or more. A shard's entries are its candidates and
//      hits in value order; every other string of it is out of vocabulary.
// The ids are those of any other merge; `distinct` is estimated (the
// strings no shard sent are not seen).
uint64_t candidate_min_count(uint64_t min_count, int shards);
// HyperLogLog, 2^14 one-byte registers (standard error ~0.8%).
inline constexpr std::size_t sketch_registers = std::size_t{1} << 14;
void sketch_add(uint8_t* registers, uint32_t value) noexcept;
// Register-wise maximum: the sketch of both sets.
void sketch_merge(uint8_t* into, const uint8_t* from) noexcept;
double sketch_estimate(const uint8_t* registers);
// Every shard's candidates, and what each is to be asked.
struct candidate_union {
  big_vector<uint32_t> values;       // every shard's candidate values, increasing
  big_vector<uint64_t> totals;       // each one's counts summed over the shards that sent it
  std::vector<hex_column> queries;   // per shard: the values it did not send, as (value, 0) pairs
};
// An error when some shard's candidates do not increase.
expected<candidate_union> candidate_queries(const std::vector<const hex_column*>& candidates);
// Merges the shards' candidates (u: candidate_queries' of them; its totals
// grow by the hits) and the hits answering the queries (hits[i]: shard i's,
// increasing, each one of its queries): calls keep(s, total) for the kept
// strings in id order and puts the id of each of shard i's entries (the
// empty string first when it has one, then its candidates and hits in value
// order; -1 = OOV) in ids[i]. An error for hits that were not asked for.
expected<column_merge_stats> merge_candidates(const std::vector<const hex_column*>& candidates, candidate_union& u,
                                              const std::vector<const hex_column*>& hits, uint64_t min_count,
                                              const std::function<void(std::string_view, uint64_t)>& keep,
                                              std::vector<big_vector<int32_t>>& ids);

std::string vocab_file_name(int column);  // "vocab-00.tsv" .. "vocab-25.tsv"

// Kept strings in id order as wire chunks: records `u16 length | bytes`.
void append_vocab_record(std::vector<char>& chunk, std::string_view s);
// Adds a chunk's strings to `col`; false if the chunk is corrupt.
bool add_vocab_chunk(column_vocabulary& col, const std::vector<char>& chunk);

// Reads vocab-CC.tsv files back (for tools and tests).
expected<vocabulary> read_vocabulary(const std::string& dir);

}  // namespace hetflow::kernels::preprocess
