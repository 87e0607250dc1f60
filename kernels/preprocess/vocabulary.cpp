#include "kernels/preprocess/vocabulary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

namespace hetflow::kernels::preprocess {

std::array<int, sparse_columns> assign_merge_columns(const std::array<uint64_t, sparse_columns>& cost, int nodes,
                                                     const std::vector<double>& speed) {
  std::array<int, sparse_columns> order{}, node{};
  for (int c = 0; c < sparse_columns; ++c) order[std::size_t(c)] = c;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return cost[std::size_t(a)] > cost[std::size_t(b)]; });
  std::vector<uint64_t> load(static_cast<std::size_t>(std::max(nodes, 1)), 0);
  const bool by_speed = speed.size() == load.size() &&
                        std::all_of(speed.begin(), speed.end(), [](double s) { return s > 0 && std::isfinite(s); });
  // A column also costs its node a fixed part - its vocabulary file, the
  // first pull's and the last ack's round trips - about as much as merging
  // 8k entries (0.5-1 ms against ~90 ns per entry, 2-node job on the
  // 2-core VM): without it the node given the many small columns finished
  // ~20 ms after the one given the few big ones. Empty columns spread too.
  constexpr uint64_t column_overhead = 8192;
  for (int c : order) {
    const uint64_t w = cost[std::size_t(c)] + column_overhead;
    std::size_t best = 0;
    for (std::size_t k = 1; k < load.size(); ++k) {
      const bool sooner = by_speed ? double(load[k] + w) / speed[k] < double(load[best] + w) / speed[best]
                                   : load[k] < load[best];
      if (sooner) best = k;
    }
    node[std::size_t(c)] = static_cast<int>(best);
    load[best] += w;
  }
  return node;
}

uint32_t fit_hashed_merge(uint32_t hashed, const merge_memory& mm, const std::array<int, sparse_columns>& merger) {
  const std::size_t shards = std::min(mm.sizes.size(), mm.holder.size());
  for (std::size_t m = 0; m < mm.cap.size(); ++m) {
    if (mm.cap[m] == 0) continue;
    int base = -1;
    for (std::size_t i = 0; i < shards; ++i)
      if (mm.holder[i] == static_cast<int>(m)) {
        base = static_cast<int>(i);
        break;
      }
    std::array<uint64_t, sparse_columns> pushed{}, merged{};
    for (int c = 0; c < sparse_columns; ++c)
      for (std::size_t i = 0; i < shards; ++i) {
        if (mm.holder[i] != static_cast<int>(m)) pushed[std::size_t(c)] += mm.sizes[i][std::size_t(c)];
        if (static_cast<int>(i) != base) merged[std::size_t(c)] += mm.sizes[i][std::size_t(c)];
      }
    const uint64_t held = m < mm.held.size() ? mm.held[m] : 0;
    const std::size_t k = static_cast<std::size_t>(std::max(1, m < mm.in_flight.size() ? mm.in_flight[m] : 1));
    for (;;) {
      std::vector<uint64_t> merging;
      uint64_t need = held;
      int largest = -1;
      for (int c = 0; c < sparse_columns; ++c) {
        if (!((hashed >> c) & 1u) || merger[std::size_t(c)] != static_cast<int>(m)) continue;
        need += pushed[std::size_t(c)] * pushed_entry_bytes;
        merging.push_back(merged[std::size_t(c)]);
        if (largest < 0 || merged[std::size_t(c)] > merged[std::size_t(largest)]) largest = c;
      }
      if (largest < 0) break;
      std::sort(merging.begin(), merging.end(), std::greater<>());
      for (std::size_t j = 0; j < merging.size() && j < k; ++j) need += merging[j] * merge_entry_bytes;
      if (need <= mm.cap[m]) break;
      hashed &= ~(1u << largest);
    }
  }
  return hashed;
}

// ---- Merging a hashed column by a count threshold ----------------------------

uint64_t candidate_min_count(uint64_t min_count, int shards) {
  if (shards <= 1 || min_count <= 1) return std::max<uint64_t>(min_count, 1);
  return (min_count + static_cast<uint64_t>(shards) - 1) / static_cast<uint64_t>(shards);
}

namespace {
constexpr int sketch_bits = 14;
static_assert(sketch_registers == std::size_t{1} << sketch_bits);
}  // namespace

void sketch_add(uint8_t* registers, uint32_t value) noexcept {
  // A 64-bit mix of the value (after splitmix64's finaliser): the top bits pick
  // the register, the rest's leading zeros + 1 are the rank.
  uint64_t h = (value + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 31)) * 0x94D049BB133111EBull;
  const std::size_t r = static_cast<std::size_t>(h >> (64 - sketch_bits));
  const uint64_t rest = (h << sketch_bits) | (uint64_t{1} << (sketch_bits - 1));  // rank <= 64 - 14 + 1
  const auto rank = static_cast<uint8_t>(__builtin_clzll(rest) + 1);
  if (rank > registers[r]) registers[r] = rank;
}

void sketch_merge(uint8_t* into, const uint8_t* from) noexcept {
  for (std::size_t i = 0; i < sketch_registers; ++i) into[i] = std::max(into[i], from[i]);
}

double sketch_estimate(const uint8_t* registers) {
  // Flajolet et al.'s estimate, linear counting while it is small (a 64-bit
  // hash needs no large-range correction).
  const double m = static_cast<double>(sketch_registers);
  double sum = 0;
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < sketch_registers; ++i) {
    sum += std::ldexp(1.0, -static_cast<int>(registers[i]));
    zeros += registers[i] == 0;
  }
  const double e = 0.7213 / (1 + 1.079 / m) * m * m / sum;
  if (e <= 2.5 * m && zeros > 0) return m * std::log(m / static_cast<double>(zeros));
  return e;
}

namespace {

// The union of the shards' candidate values, increasing, with their summed
// counts; false if some shard's values do not increase.
bool union_of(const std::vector<const hex_column*>& cands, big_vector<uint32_t>& values, big_vector<uint64_t>& totals) {
  const std::size_t n = cands.size();
  for (const hex_column* c : cands)
    for (std::size_t j = 1; j < c->values(); ++j)
      if (c->pairs[2 * j] <= c->pairs[2 * j - 2]) return false;
  std::size_t bound = 0;
  for (const hex_column* c : cands) bound += c->values();
  values.resize(bound);
  totals.resize(bound);
  uint32_t* v = values.data();
  uint64_t* t = totals.data();
  if (n == 2) {
    // Two shards (the common case): one merge of two sorted runs. The
    // k-way loop below took 2.3 ms for candidate_queries of two 60k-value
    // columns, this one 1.35 ms (/tmp microbenchmark, 2026-12-06), and a
    // node merges about four such columns.
    const uint32_t *a = cands[0]->pairs.data(), *ae = a + cands[0]->pairs.size();
    const uint32_t *b = cands[1]->pairs.data(), *be = b + cands[1]->pairs.size();
    while (a != ae && b != be) {
      if (a[0] < b[0]) {
        *v++ = a[0], *t++ = a[1], a += 2;
      } else if (b[0] < a[0]) {
        *v++ = b[0], *t++ = b[1], b += 2;
      } else {
        *v++ = a[0], *t++ = uint64_t{a[1]} + b[1], a += 2, b += 2;
      }
    }
    for (; a != ae; a += 2) *v++ = a[0], *t++ = a[1];
    for (; b != be; b += 2) *v++ = b[0], *t++ = b[1];
  } else {
    constexpr uint64_t done = uint64_t{1} << 32;
    std::vector<std::size_t> at(n, 0);
    std::vector<uint64_t> head(n);
    auto value_of = [&](std::size_t i) -> uint64_t {
      return at[i] < cands[i]->values() ? cands[i]->pairs[2 * at[i]] : done;
    };
    for (std::size_t i = 0; i < n; ++i) head[i] = value_of(i);
    for (;;) {
      const uint64_t x = *std::min_element(head.begin(), head.end());
      if (x == done) break;
      uint64_t total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (head[i] != x) continue;
        total += cands[i]->pairs[2 * at[i] + 1];
        ++at[i];
        head[i] = value_of(i);
      }
      *v++ = static_cast<uint32_t>(x), *t++ = total;
    }
  }
  values.resize(static_cast<std::size_t>(v - values.data()));
  totals.resize(values.size());
  return true;
}

}  // namespace

expected<candidate_union> candidate_queries(const std::vector<const hex_column*>& candidates) {
  candidate_union u;
  if (!union_of(candidates, u.values, u.totals)) return make_error(errc::internal, "a shard's candidates do not increase");
  u.queries.resize(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const hex_column& c = *candidates[i];
    hex_column& out = u.queries[i];
    out.pairs.resize(2 * (u.values.size() - c.values()));
    uint32_t* w = out.pairs.data();
    std::size_t a = 0;
    for (uint32_t v : u.values) {
      if (a < c.values() && c.pairs[2 * a] == v) {
        ++a;
        continue;
      }
      *w++ = v;
      *w++ = 0;
    }
  }
  return u;
}

expected<column_merge_stats> merge_candidates(const std::vector<const hex_column*>& candidates, candidate_union& u,
                                              const std::vector<const hex_column*>& hits, uint64_t min_count,
                                              const std::function<void(std::string_view, uint64_t)>& keep,
                                              std::vector<big_vector<int32_t>>& ids) {
  const std::size_t n = candidates.size();
  if (hits.size() != n) return make_error(errc::internal, "hits of " + std::to_string(hits.size()) + " shards for " +
                                                              std::to_string(n));
  const big_vector<uint32_t>& all = u.values;
  big_vector<uint64_t>& total = u.totals;
  // Each shard's hits: values of the union it did not send, increasing.
  for (std::size_t i = 0; i < n; ++i) {
    const hex_column& c = *candidates[i];
    const hex_column& h = *hits[i];
    std::size_t a = 0, b = 0;
    for (std::size_t j = 0; j < all.size() && b < h.values(); ++j) {
      const uint32_t v = all[j];
      if (a < c.values() && c.pairs[2 * a] == v) {
        ++a;
        if (h.pairs[2 * b] == v) break;  // a hit it had sent as a candidate
        continue;
      }
      if (h.pairs[2 * b] == v) total[j] += h.pairs[2 * b++ + 1];
    }
    if (b != h.values())
      return make_error(errc::internal, "shard " + std::to_string(i) + " answered " + std::to_string(h.values()) +
                                            " queries, " + std::to_string(b) + " of them asked");
  }
  column_merge_stats st;
  bool empty_seen = false;
  uint64_t empty_total = 0;
  for (const hex_column* c : candidates) {
    empty_seen = empty_seen || c->has_empty;
    empty_total += c->empty_count;
  }
  int32_t next = 0, empty_id = -1;
  if (empty_seen && empty_total >= min_count) {
    empty_id = next++;
    keep(std::string_view("", 0), empty_total);  // a non-null pointer: add() memcpys it
  }
  big_vector<int32_t> id(all.size());
  char buf[8];
  for (std::size_t j = 0; j < all.size(); ++j) {
    id[j] = -1;
    if (total[j] < min_count) continue;
    if (next >= INT32_MAX - 1)  // ids, the OOV id and the empty string's fit int32
      return make_error(errc::out_of_memory, "more than 2^31-2 kept strings; use hash mode");
    id[j] = next++;
    hex8_chars(all[j], buf);
    keep(std::string_view(buf, 8), total[j]);
  }
  st.kept = static_cast<uint64_t>(next);
  ids.assign(n, {});
  for (std::size_t i = 0; i < n; ++i) {
    const hex_column& c = *candidates[i];
    const hex_column& h = *hits[i];
    big_vector<int32_t>& out = ids[i];
    out.resize((c.has_empty ? 1 : 0) + c.values() + h.values());
    int32_t* w = out.data();
    if (c.has_empty) *w++ = empty_id;
    std::size_t a = 0, b = 0;
    for (std::size_t j = 0; j < all.size(); ++j) {
      const uint32_t v = all[j];
      if (a < c.values() && c.pairs[2 * a] == v) {
        ++a;
        *w++ = id[j];
      } else if (b < h.values() && h.pairs[2 * b] == v) {
        ++b;
        *w++ = id[j];
      }
    }
  }
  // Every string seen: the sketches' estimate, at least the union the merge
  // saw (the empty string is not in the sketches).
  std::vector<uint8_t> sk(sketch_registers, 0);
  bool sketched = true;
  for (const hex_column* c : candidates) {
    if (c->sketch.size() != sketch_registers) sketched = false;
    else sketch_merge(sk.data(), c->sketch.data());
  }
  const double est = sketched ? std::round(sketch_estimate(sk.data())) : 0.0;
  st.distinct = std::max<uint64_t>(all.size(), static_cast<uint64_t>(est)) + (empty_seen ? 1 : 0);
  st.distinct_estimated = true;
  return st;
}

std::string vocab_file_name(int column) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "vocab-%02d.tsv", column);
  return buf;
}

void append_vocab_record(std::vector<char>& chunk, std::string_view s) {
  uint16_t len = static_cast<uint16_t>(s.size());
  std::size_t at = chunk.size();
  chunk.resize(at + 2 + s.size());
  std::memcpy(chunk.data() + at, &len, 2);
  std::memcpy(chunk.data() + at + 2, s.data(), s.size());
}

namespace {

// Writes v's LEB128 bytes (at most 5) at p; returns the end.
inline char* put_leb(char* p, uint32_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

void append_leb(std::vector<char>& chunk, uint32_t v) {
  char buf[5];
  chunk.insert(chunk.end(), buf, put_leb(buf, v));
}

// The LEB128 value at pos (at most 32 bits); false past the chunk's end.
bool read_leb(const std::vector<char>& chunk, std::size_t& pos, uint64_t& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(chunk.data());
  v = 0;
  for (int shift = 0;; shift += 7) {
    if (pos >= chunk.size() || shift > 28) return false;
    unsigned char b = p[pos++];
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
}

}  // namespace

void append_id(std::vector<char>& chunk, int32_t id, int32_t& prev_kept) {
  uint32_t v = 0;
  if (id >= 0) {
    v = static_cast<uint32_t>(id - prev_kept);
    prev_kept = id;
  }
  append_leb(chunk, v);
}

bool decode_ids(const std::vector<char>& chunk, int32_t& prev_kept, std::vector<int32_t>& out) {
  std::size_t pos = 0;
  while (pos < chunk.size()) {
    uint64_t v;
    if (!read_leb(chunk, pos, v)) return false;
    if (v == 0) {
      out.push_back(-1);
      continue;
    }
    if (prev_kept < -1 || static_cast<int64_t>(prev_kept) + static_cast<int64_t>(v) > INT32_MAX) return false;
    prev_kept = static_cast<int32_t>(static_cast<int64_t>(prev_kept) + static_cast<int64_t>(v));
    out.push_back(prev_kept);
  }
  return true;
}

void append_plain_ids(std::vector<char>& chunk, const int32_t* ids, std::size_t n) {
  const std::size_t at = chunk.size();
  chunk.resize(at + 4 * n);
  std::memcpy(chunk.data() + at, ids, 4 * n);
}

bool kept_ids_increase(const int32_t* ids, std::size_t n) {
  int32_t prev = -1;
  for (std::size_t k = 0; k < n; ++k) {
    if (ids[k] < 0) continue;
    if (ids[k] <= prev) return false;
    prev = ids[k];
  }
  return true;
}

bool decode_plain_ids(const std::vector<char>& chunk, std::vector<int32_t>& out) {
  if (chunk.size() % 4) return false;
  const std::size_t at = out.size(), n = chunk.size() / 4;
  out.resize(at + n);
  std::memcpy(out.data() + at, chunk.data(), chunk.size());
  for (std::size_t k = at; k < at + n; ++k)
    if (out[k] < -1) return false;
  return true;
}

namespace {
constexpr uint8_t hex_chunk_empty = 1;  // u8 | u64 count
constexpr uint8_t hex_chunk_run = 2;    // u8 | u32 n | n x (u32 value | u32 count)
constexpr uint8_t hex_chunk_delta = 3;  // u8 | u32 n | n x (LEB128 gap | LEB128 count)
constexpr uint8_t hex_chunk_sketch = 4; // u8 | u32 n | n bytes

}  // namespace

std::vector<char> next_hex_column_chunk(const hex_column& h, std::size_t& next, std::size_t max_bytes) {
  std::vector<char> chunk;
  if (next == 0 && !h.sketch.empty()) {
    const auto n = static_cast<uint32_t>(h.sketch.size());
    chunk.resize(5 + n);
    chunk[0] = static_cast<char>(hex_chunk_sketch);
    std::memcpy(chunk.data() + 1, &n, 4);
    std::memcpy(chunk.data() + 5, h.sketch.data(), n);
  }
  if (next >= h.entries()) return chunk;
  if (h.has_empty && next == 0) {
    const std::size_t at = chunk.size();
    chunk.resize(at + 9);
    chunk[at] = static_cast<char>(hex_chunk_empty);
    std::memcpy(chunk.data() + at + 1, &h.empty_count, 8);
    ++next;
  }
  const std::size_t first = next - (h.has_empty ? 1 : 0);  // into the values
  if (first >= h.values()) return chunk;
  const std::size_t left = std::min(h.values() - first, std::size_t{UINT32_MAX});
  // Values that increase (export_column sorts them) go as LEB128 gaps to the
  // value before (this chunk's or an earlier one's; a column's first as
  // itself) and LEB128 counts: about 3.5 bytes an entry instead of 8 on
  // Criteo's columns, so less for the nodes' connections to copy. Values
  // out of order (an unsorted export: tests) go plain, until a stretch of
  // delta_run increasing ones.
  constexpr std::size_t delta_run = 16;
  const uint32_t* p = h.pairs.data() + 2 * first;
  bool have = first > 0;
  uint32_t last = have ? h.pairs[2 * (first - 1)] : 0;
  auto increasing_from = [&](std::size_t k) {
    uint32_t before = last;
    bool any = have;
    for (std::size_t j = k; j < std::min(left, k + delta_run); ++j) {
      if (any && p[2 * j] <= before) return false;
      any = true;
      before = p[2 * j];
    }
    return true;
  };
  chunk.reserve(std::min(max_bytes, chunk.size() + 5 + 10 * left));
  std::size_t k = 0;  // entries in this chunk
  while (k < left && (k == 0 || chunk.size() + 5 + 10 <= max_bytes)) {
    const std::size_t at = chunk.size();
    chunk.resize(at + 5);
    uint32_t n = 0;
    if (!have || p[2 * k] > last) {
      chunk[at] = static_cast<char>(hex_chunk_delta);
      // Written through a pointer into room for as many as fit at 10 bytes
      // an entry (the most one takes; at least one), then cut to what was.
      const std::size_t end = std::max(at + 5 + 10, std::min(max_bytes, at + 5 + 10 * (left - k)));
      chunk.resize(end);
      char* w = chunk.data() + at + 5;
      const char* stop = chunk.data() + end;
      do {
        const uint32_t v = p[2 * k];
        w = put_leb(w, have ? v - last - 1 : v);
        w = put_leb(w, p[2 * k + 1]);
        have = true;
        last = v;
        ++n;
        ++k;
      } while (k < left && p[2 * k] > last && stop - w >= 10);
      chunk.resize(static_cast<std::size_t>(w - chunk.data()));
    } else {
      chunk[at] = static_cast<char>(hex_chunk_run);
      do {
        const std::size_t w = chunk.size();
        chunk.resize(w + 8);
        std::memcpy(chunk.data() + w, p + 2 * k, 8);
        have = true;
        last = p[2 * k];
        ++n;
        ++k;
      } while (k < left && chunk.size() + 8 <= max_bytes && !increasing_from(k));
    }
    std::memcpy(chunk.data() + at + 1, &n, 4);
  }
  next += k;
  return chunk;
}

bool add_hex_column_chunk(hex_column& h, const std::vector<char>& chunk) {
  std::size_t pos = 0;
  while (pos < chunk.size()) {
    const auto tag = static_cast<uint8_t>(chunk[pos++]);
    if (tag == hex_chunk_sketch) {
      // Once, of sketch_registers bytes, each a HyperLogLog rank (<= 64).
      uint32_t n;
      if (!h.sketch.empty() || chunk.size() - pos < 4) return false;
      std::memcpy(&n, chunk.data() + pos, 4);
      pos += 4;
      if (n != sketch_registers || chunk.size() - pos < n) return false;
      h.sketch.assign(chunk.data() + pos, chunk.data() + pos + n);
      for (uint8_t r : h.sketch)
        if (r > 64) return false;
      pos += n;
      continue;
    }
    if (tag == hex_chunk_empty) {
      // Once, before any value.
      if (h.has_empty || !h.pairs.empty() || chunk.size() - pos < 8) return false;
      std::memcpy(&h.empty_count, chunk.data() + pos, 8);
      h.has_empty = true;
      pos += 8;
      continue;
    }
    uint32_t n;
    if ((tag != hex_chunk_run && tag != hex_chunk_delta) || chunk.size() - pos < 4) return false;
    std::memcpy(&n, chunk.data() + pos, 4);
    pos += 4;
    if (tag == hex_chunk_run) {
      if ((chunk.size() - pos) / 8 < n) return false;
      if (n == 0) continue;  // (a null data() must not reach memcpy)
      const std::size_t at = h.pairs.size();
      h.pairs.resize(at + std::size_t{2} * n);
      std::memcpy(h.pairs.data() + at, chunk.data() + pos, std::size_t{8} * n);
      pos += std::size_t{8} * n;
      continue;
    }
    // Delta-coded: at least 2 bytes an entry; values strictly increase.
    if ((chunk.size() - pos) / 2 < n) return false;
    bool have = !h.pairs.empty();
    uint64_t last = have ? h.pairs[h.pairs.size() - 2] : 0;
    const std::size_t at = h.pairs.size();
    h.pairs.resize(at + std::size_t{2} * n);
    uint32_t* out = h.pairs.data() + at;
    for (uint32_t k = 0; k < n; ++k) {
      uint64_t gap, count;
      const bool ok = read_leb(chunk, pos, gap) && read_leb(chunk, pos, count);
      const uint64_t v = have ? last + 1 + gap : gap;
      if (!ok || v > UINT32_MAX || count > UINT32_MAX) {
        h.pairs.resize(at);  // the record's entries go; earlier ones stay
        return false;
      }
      out[2 * k] = static_cast<uint32_t>(v);
      out[2 * k + 1] = static_cast<uint32_t>(count);
      have = true;
      last = v;
    }
  }
  return true;
}

bool add_vocab_chunk(column_vocabulary& col, const std::vector<char>& chunk) {
  std::size_t pos = 0;
  while (pos < chunk.size()) {
    if (chunk.size() - pos < 2) return false;
    uint16_t len;
    std::memcpy(&len, chunk.data() + pos, 2);
    if (chunk.size() - pos - 2 < len) return false;
    col.add(std::string_view(chunk.data() + pos + 2, len));
    pos += 2 + len;
  }
  return true;
}

expected<vocabulary> read_vocabulary(const std::string& dir) {
  vocabulary v;
  for (int c = 0; c < sparse_columns; ++c) {
    std::string path = dir + "/" + vocab_file_name(c);
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(errc::not_found, "cannot open " + path);
    std::string line;
    while (std::getline(in, line)) {
      auto tab = line.rfind('\t');
      if (tab == std::string::npos)
        return make_error(errc::parse_error, path + ": a line without a count");
      v.columns[c].add(std::string_view(line).substr(0, tab));
    }
  }
  return v;
}

}  // namespace hetflow::kernels::preprocess
