// count_stream: sorted (string, count) streams, the unit that pass-1 counts
// travel in: in memory, merged, and cut into byte chunks for the wire. (Spill
// files carry a local id as well; preprocess.cpp reads them as a
// count_stream.)
//
// Chunk record format, little-endian:
//   u16 length | length bytes | u64 count            a string (length <= 65534)
//   u16 0xffff | u32 n | n x (u32 value | u64 count)  n strings of 8 lowercase
//                                                     hex digits, as values
// A stream yields strings in strictly increasing byte order (memcmp), each
// once. Merging k streams sums the counts of equal strings. Criteo's ids are
// 8 hex digits (hex_key.hpp): the hex runs carry them as integers, 12 bytes
// instead of 18, and next_hex() lets a merge compare them as integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/preprocess/string_key_map.hpp"
#include "schemas/error.hpp"

namespace hetflow::kernels::preprocess {

// The longest string a count chunk carries (0xffff marks a hex run): the
// upper bound of the jobs' max_field_bytes.
constexpr std::size_t max_chunk_string_bytes = 0xfffe;

class count_stream {
public:
  virtual ~count_stream() = default;
  // The next entry; `s` stays valid until the next call of next() or
  // next_hex(). False at the end or on error (see error()).
  virtual bool next(std::string_view& s, uint64_t& count) = 0;
  virtual status error() const { return {}; }
  // Strings the stream leaves out as rarer than the job's min_count (a job's
  // only shard: preprocess_options::drop_below): distinct strings all the
  // same, each mapped to the OOV id. Known once the stream exists.
  virtual uint64_t dropped() const { return 0; }
  // Up to max of the next entries at once, when they are strings of 8
  // lowercase hex digits: their values (hex8_value: numeric order = byte
  // order) and counts, in order; returns how many. 0 takes nothing, and
  // next() yields the next entry: at the end, before another string, or
  // from a stream that does not batch (it may always answer 0). Each entry
  // is yielded once, by one call or the other. A stream that finds its
  // input corrupt part-way through a batch answers 0 (what it took is lost)
  // and says so in error(); next() then returns false.
  virtual std::size_t next_hex(uint32_t* values, uint64_t* counts, std::size_t max) {
    (void)values, (void)counts, (void)max;
    return 0;
  }
};

using count_entries = std::vector<std::pair<std::string, uint64_t>>;

// memcmp order of two strings (<0, 0, >0), with the first 8 bytes compared as
// one big-endian word: Criteo's ids are 8 hex digits, and the merge compares
// every entry with its neighbours (a call to memcmp per compare was ~6% of a
// 2-node vocab job).
inline int key_compare(std::string_view a, std::string_view b) noexcept {
  if (a.size() >= 8 && b.size() >= 8) {
    uint64_t x, y;
    __builtin_memcpy(&x, a.data(), 8);
    __builtin_memcpy(&y, b.data(), 8);
    if (x != y) return __builtin_bswap64(x) < __builtin_bswap64(y) ? -1 : 1;
    if (a.size() == 8 && b.size() == 8) return 0;
    return a.substr(8).compare(b.substr(8));
  }
  return a.compare(b);
}
inline bool key_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  if (a.size() == 8) {
    uint64_t x, y;
    __builtin_memcpy(&x, a.data(), 8);
    __builtin_memcpy(&y, b.data(), 8);
    return x == y;
  }
  return a == b;
}

// The map's entries sorted by string.
count_entries sorted_entries(const string_key_map<uint64_t>& m);

std::unique_ptr<count_stream> memory_stream(count_entries entries);

// k-way merge (a heap), summing equal strings. The inputs must outlive it.
std::unique_ptr<count_stream> merged_stream(std::vector<count_stream*> inputs);
std::unique_ptr<count_stream> merged_stream(std::vector<std::unique_ptr<count_stream>> owned);

// Cuts the next chunk of at most max_bytes (>= one record) off `in`; an empty
// chunk means the stream has ended.
expected<std::vector<char>> next_count_chunk(count_stream& in, std::size_t max_bytes);

// A stream fed by chunks from `fetch` (e.g. a remote shard); an empty chunk
// ends it. Checks every record against the chunk's bounds and the order.
// `who` names the source in errors.
using chunk_fetcher = std::function<expected<std::vector<char>>()>;
std::unique_ptr<count_stream> chunk_stream(chunk_fetcher fetch, std::string who);

}  // namespace hetflow::kernels::preprocess
