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

}  // namespace hetflow::kernels::preprocess
