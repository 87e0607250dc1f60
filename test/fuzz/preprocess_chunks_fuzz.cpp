// libFuzzer target: the byte chunks that pre-processing shards exchange
// (actors/builtin/preprocess.cpp carries them as std::vector<char>):
//
//   mode 0  count chunks  (u16 len | bytes | u64 count, or a hex run:
//                          u16 0xffff | u32 n | n x (u32 value | u64 count))*
//                                                         -> chunk_stream
//   mode 1  id chunks     LEB128 id deltas                -> decode_ids
//   mode 2  vocab chunks  (u16 len | bytes)*              -> add_vocab_chunk
//   mode 3  hashed-merge count chunks (the empty string's count, plain
//           and delta-coded runs of a hex column)        -> add_hex_column_chunk
//
// Input: byte 0 picks the mode (mod 4); then chunks, each `u16 length |
// bytes` (little-endian), the last one taking whatever is left. Chunks are fed
// one after another, as they would arrive from one peer.
//
// Contract: a corrupt chunk is refused (false / an error status), never read
// out of bounds; what is accepted keeps the format's promises (strings in
// strictly increasing order, kept ids strictly increasing).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/preprocess/count_stream.hpp"
#include "kernels/preprocess/hex_key.hpp"
#include "kernels/preprocess/vocabulary.hpp"
#include "test/fuzz/fuzz_check.hpp"

namespace pp = hetflow::kernels::preprocess;
using hetflow::errc;

namespace {

std::vector<std::vector<char>> split_chunks(const unsigned char* p, std::size_t n) {
  std::vector<std::vector<char>> out;
  std::size_t pos = 0;
  while (pos < n) {
    if (n - pos < 2) {
      out.emplace_back(p + pos, p + n);
      break;
    }
    uint16_t len;
    std::memcpy(&len, p + pos, 2);
    pos += 2;
    const std::size_t take = std::min<std::size_t>(len, n - pos);
    out.emplace_back(p + pos, p + pos + take);
    pos += take;
  }
  return out;
}

void count_chunks(const std::vector<std::vector<char>>& chunks) {
  std::size_t next = 0;
  auto s = pp::chunk_stream(
      [&]() -> hetflow::expected<std::vector<char>> {
        // An empty chunk ends the stream, so empty input chunks are skipped.
        while (next < chunks.size() && chunks[next].empty()) ++next;
        if (next == chunks.size()) return std::vector<char>{};
        return chunks[next++];
      },
      "fuzz peer");
  std::string prev;
  bool first = true;
  std::string_view str;
  uint64_t count = 0;
  std::size_t records = 0;
  // Hex runs are taken in batches of 3 and the rest one by one, alternately
  // (count_stream::next_hex); every entry as a string in one order.
  uint32_t values[3];
  uint64_t counts[3];
  for (bool batch = true;; batch = !batch) {
    std::size_t n = 0;
    if (batch) {
      n = s->next_hex(values, counts, 3);
      FUZZ_CHECK(n <= 3, "next_hex: at most max");
    }
    for (std::size_t k = 0; k < n; ++k) {
      char b[8];
      pp::hex8_chars(values[k], b);
      const std::string_view v(b, 8);
      FUZZ_CHECK(first || prev < v, "strings strictly increasing (a hex run)");
      prev.assign(v);
      first = false;
      FUZZ_CHECK(++records <= 1 << 20, "bounded by the input");
    }
    if (batch) continue;
    if (!s->next(str, count)) break;
    FUZZ_CHECK(first || prev < str, "strings strictly increasing");
    prev.assign(str);
    first = false;
    FUZZ_CHECK(++records <= 1 << 20, "bounded by the input");
  }
  const auto e = s->error();
  FUZZ_CHECK(e.ok() || e.code() == errc::wire_corrupt || e.code() == errc::parse_error ||
                 e.code() == errc::invalid_argument,
             "chunk_stream: a corrupt-input error");
}

void id_chunks(const std::vector<std::vector<char>>& chunks) {
  int32_t prev_kept = -1;
  std::vector<int32_t> ids;
  for (const auto& c : chunks) {
    const std::size_t before = ids.size();
    if (!pp::decode_ids(c, prev_kept, ids)) return;
    FUZZ_CHECK(ids.size() - before <= c.size(), "at most one id per byte");
  }
  // Kept ids strictly increase; re-encoding gives back the same ids.
  int32_t last = -1;
  std::vector<char> again;
  int32_t enc_prev = -1;
  for (int32_t id : ids) {
    FUZZ_CHECK(id == -1 || id > last, "kept ids strictly increasing");
    if (id >= 0) last = id;
    pp::append_id(again, id, enc_prev);
  }
  std::vector<int32_t> back;
  int32_t dec_prev = -1;
  FUZZ_CHECK(pp::decode_ids(again, dec_prev, back) && back == ids, "append_id/decode_ids round trip");
}

void vocab_chunks(const std::vector<std::vector<char>>& chunks) {
  pp::column_vocabulary col;
  for (const auto& c : chunks)
    if (!pp::add_vocab_chunk(col, c)) return;
}

void hex_column_chunks(const std::vector<std::vector<char>>& chunks) {
  pp::hex_column h;
  for (const auto& c : chunks) {
    const std::size_t before = h.values();
    const bool ok = pp::add_hex_column_chunk(h, c);
    FUZZ_CHECK(h.values() - before <= c.size() / 2, "at most one entry per 2 bytes");
    if (!ok) break;  // what came before stays, as the merger would have it
  }
  // What was accepted goes out and back the same, in chunks of any size.
  for (std::size_t max : {std::size_t{1}, std::size_t{64}, std::size_t{1} << 16}) {
    pp::hex_column back;
    std::size_t next = 0;
    for (;;) {
      auto c = pp::next_hex_column_chunk(h, next, max);
      if (c.empty()) break;
      FUZZ_CHECK(pp::add_hex_column_chunk(back, c), "own chunks accepted");
    }
    FUZZ_CHECK(next == h.entries() && back.has_empty == h.has_empty && back.empty_count == h.empty_count &&
                   back.pairs == h.pairs,
               "next_hex_column_chunk/add_hex_column_chunk round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size == 0) return 0;
  const auto chunks = split_chunks(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: count_chunks(chunks); break;
    case 1: id_chunks(chunks); break;
    case 2: vocab_chunks(chunks); break;
    default: hex_column_chunks(chunks); break;
  }
  return 0;
}
