#include "kernels/preprocess/vocabulary.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

namespace hetflow::kernels::preprocess {

std::array<int, sparse_columns> assign_merge_columns(const std::array<uint64_t, sparse_columns>& cost, int nodes) {
  std::array<int, sparse_columns> order{}, node{};
  for (int c = 0; c < sparse_columns; ++c) order[std::size_t(c)] = c;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return cost[std::size_t(a)] > cost[std::size_t(b)]; });
  std::vector<uint64_t> load(static_cast<std::size_t>(std::max(nodes, 1)), 0);
  for (int c : order) {
    std::size_t best = 0;
    for (std::size_t k = 1; k < load.size(); ++k)
      if (load[k] < load[best]) best = k;
    node[std::size_t(c)] = static_cast<int>(best);
    // A column also costs its node a fixed part - its vocabulary file, the
    // first pull's and the last ack's round trips - about as much as merging
    // 8k entries (0.5-1 ms against ~90 ns per entry, 2-node job on the
    // 2-core VM): without it the node given the many small columns finished
    // ~20 ms after the one given the few big ones. Empty columns spread too.
    constexpr uint64_t column_overhead = 8192;
    load[best] += cost[std::size_t(c)] + column_overhead;
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

void append_leb(std::vector<char>& chunk, uint32_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    chunk.push_back(static_cast<char>(b | (v ? 0x80 : 0)));
  } while (v);
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
}  // namespace

std::vector<char> next_hex_column_chunk(const hex_column& h, std::size_t& next, std::size_t max_bytes) {
  std::vector<char> chunk;
  if (next >= h.entries()) return chunk;
  if (h.has_empty && next == 0) {
    chunk.resize(9);
    chunk[0] = static_cast<char>(hex_chunk_empty);
    std::memcpy(chunk.data() + 1, &h.empty_count, 8);
    ++next;
  }
  const std::size_t first = next - (h.has_empty ? 1 : 0);  // into the values
  if (first >= h.values()) return chunk;
  const std::size_t room = max_bytes > chunk.size() + 5 + 8 ? (max_bytes - chunk.size() - 5) / 8 : 1;
  const uint32_t n = static_cast<uint32_t>(std::min({room, h.values() - first, std::size_t{UINT32_MAX}}));
  const std::size_t at = chunk.size();
  chunk.resize(at + 5 + std::size_t{8} * n);
  chunk[at] = static_cast<char>(hex_chunk_run);
  std::memcpy(chunk.data() + at + 1, &n, 4);
  std::memcpy(chunk.data() + at + 5, h.pairs.data() + 2 * first, std::size_t{8} * n);
  next += n;
  return chunk;
}

bool add_hex_column_chunk(hex_column& h, const std::vector<char>& chunk) {
  std::size_t pos = 0;
  while (pos < chunk.size()) {
    const auto tag = static_cast<uint8_t>(chunk[pos++]);
    if (tag == hex_chunk_empty) {
      // Once, before any value.
      if (h.has_empty || !h.pairs.empty() || chunk.size() - pos < 8) return false;
      std::memcpy(&h.empty_count, chunk.data() + pos, 8);
      h.has_empty = true;
      pos += 8;
      continue;
    }
    uint32_t n;
    if (tag != hex_chunk_run || chunk.size() - pos < 4) return false;
    std::memcpy(&n, chunk.data() + pos, 4);
    pos += 4;
    if ((chunk.size() - pos) / 8 < n) return false;
    const std::size_t at = h.pairs.size();
    h.pairs.resize(at + std::size_t{2} * n);
    std::memcpy(h.pairs.data() + at, chunk.data() + pos, std::size_t{8} * n);
    pos += std::size_t{8} * n;
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
