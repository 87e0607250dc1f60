// input_split: input files, memory-mapped, cut into line-aligned shards.
//
// Rule (Hadoop's): a byte range [b, e) of a file owns every line that STARTS
// in it. align_to_line(data, b) moves b forward to the next line start (b
// itself when b == 0 or data[b-1] == '\n'), so aligned ranges partition the
// file into whole lines without any coordination: every node computes the
// same plan from the file sizes alone, and reads only a few bytes past its
// range ends to align them.
//
// A shard is a contiguous slice of the inputs taken in order (file 0 then file
// 1 ...), possibly spanning files: shard i of S covers global bytes
// [i*T/S, (i+1)*T/S) of the concatenation (T = total bytes), so shard order is
// input order and part-i files concatenate to the whole input. Shards may
// also be cut in proportion to weights (the nodes' cores, see the preprocess
// job): then every node needs the same weights to compute the same plan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"

namespace hetflow::kernels::preprocess {

// A read-only mapping of a whole file (empty files map to nothing).
class mapped_file {
public:
  static expected<std::shared_ptr<const mapped_file>> open(const std::string& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const char* data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  // Tells the kernel these pages will not be read again (pass 2 done).
  void drop_pages(uint64_t begin, uint64_t end) const noexcept;
  // Copies [off, off + n) to dst with pread (see parse_block: on the 2-core
  // PVM guest scanning a read copy took half the time of scanning the
  // mapping, whose 4 KiB pages each cost a TLB miss and, the first time, a
  // fault). Fails when the file got shorter since it was opened.
  status read(uint64_t off, char* dst, std::size_t n) const;

private:
  mapped_file() = default;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;  // kept open for read()
  std::string path_;
};

// First line start at or after `pos` (size when none).
uint64_t align_to_line(const char* data, uint64_t size, uint64_t pos) noexcept;

// Number of '\n' in data[0, pos): the 0-based line index of the line at pos.
uint64_t count_lines_before(const char* data, uint64_t pos) noexcept;

struct input_piece {
  int file = 0;        // index into the inputs
  uint64_t begin = 0;  // nominal, unaligned: the piece owns lines starting in [begin, end)
  uint64_t end = 0;
};

struct shard_plan {
  std::vector<input_piece> pieces;  // in input order
  uint64_t bytes() const noexcept;
};

// Cuts inputs of the given sizes into `shards` shards (see above).
std::vector<shard_plan> plan_shards(const std::vector<uint64_t>& file_sizes, int shards);
// The same with shard i's share of the bytes weights[i] / sum(weights) (a
// weight of 0 counts as 1): shard i covers [T*W_i/W, T*W_(i+1)/W), W_i the
// weights before it. Equal weights give the plan above, byte for byte.
std::vector<shard_plan> plan_shards(const std::vector<uint64_t>& file_sizes, const std::vector<uint64_t>& weights);
// The pieces of global bytes [begin, end) of the concatenated inputs (nominal:
// the lines that start in it).
shard_plan plan_range(const std::vector<uint64_t>& file_sizes, uint64_t begin, uint64_t end);

// Pass 1 handed out in ranges while it runs (the preprocess job's balance =
// "steal"), so that a node that is done first takes more of the input:
// shard 0 starts at the inputs' first byte and goes forward, the last shard
// at their end and goes backward, a shard between them at the middle of its
// share (the weights) and goes both ways. A claim takes a quarter of the gap
// between the shard's front and its neighbour's on the side with the larger
// gap (at least min_unit; all of it when the neighbour is lost or the rest
// would be under min_unit), so the claims shrink as the gaps close and each
// shard's ranges always form one contiguous slice. Every byte is claimed
// exactly once. Pure bookkeeping, no I/O: the coordinator (pp_vocab) holds
// one; tests drive it directly.
struct byte_range {
  uint64_t begin = 0, end = 0;
  bool empty() const noexcept { return begin >= end; }
  uint64_t bytes() const noexcept { return end > begin ? end - begin : 0; }
};
class range_claims {
public:
  range_claims() = default;
  range_claims(uint64_t total, const std::vector<uint64_t>& weights, uint64_t min_unit);
  // The next range for `shard` (empty: nothing is left beside it, and
  // nothing ever will be).
  byte_range claim(int shard);
  // A lost shard claims no more (its live neighbours take the gaps beside
  // it); its slice stays as it is, for another node to count again, but
  // for a gap beside a neighbour frozen before it, which it takes in (no
  // one else could claim it).
  void freeze(int shard);
  // What `shard` has claimed: [back front, forward front).
  byte_range slice(int shard) const;
  int shards() const noexcept { return static_cast<int>(back_.size()); }
  uint64_t claims(int shard) const;  // ranges handed to it

private:
  uint64_t total_ = 0, min_unit_ = 1;
  std::vector<uint64_t> back_, front_;  // shard i holds [back_[i], front_[i])
  std::vector<uint64_t> claims_;
  std::vector<bool> frozen_;
};
// The smallest claim for a job: 1/64 of a node's even share, 1-64 MiB
// (2 MiB claims ended two nodes' counts within 5 ms of each other where
// 4 MiB ones left up to 28 ms, 1M rows, 2026-12-06).
uint64_t default_claim_unit(uint64_t total, int shards);

}  // namespace hetflow::kernels::preprocess
