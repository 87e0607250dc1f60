#include "kernels/preprocess/preprocess.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_invoke.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include "kernels/preprocess/hex_key.hpp"
#include "kernels/preprocess/huge_memory.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/resources.hpp"

namespace hetflow::kernels::preprocess {
namespace fs = std::filesystem;
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// log(x + 1) for small x from a table (most Criteo integers are small); the
// same function fills it, so results are bit-identical.
struct dense_table {
  static constexpr int64_t size = 1 << 16;
  float v[size];
  dense_table() {
    for (int64_t i = 0; i < size; ++i) v[i] = dense_transform(i);
  }
};
const dense_table& dense_lut() {
  static const dense_table t;
  return t;
}
inline float dense_value(int64_t x, const dense_table& t) noexcept {
  if (x <= 0) return 0.0f;
  if (x < dense_table::size) return t.v[x];
  return dense_transform(x);
}

// A line-aligned slice of one piece.
struct block {
  int piece = 0;
  int part = 0;  // the staged part its records go to (count_ranges)
  const mapped_file* file = nullptr;
  uint64_t begin = 0, end = 0;  // aligned: [begin, end) holds whole lines
  // The most rows the block can hold: a good line has at least 40 bytes.
  std::size_t max_rows() const noexcept { return static_cast<std::size_t>((end - begin) / 40 + 1); }
};

struct piece_info {
  const mapped_file* file = nullptr;
  uint64_t begin = 0;  // aligned
  int64_t line_base = -1;  // 0-based line index of the first line; -1 = not computed
  uint64_t lines_seen = 0;  // lines of earlier blocks (serial stage)
};

std::vector<block> cut_blocks(const input_set& in, const shard_plan& shard,
                              std::vector<piece_info>& pieces, std::size_t block_bytes) {
  std::vector<block> blocks;
  for (std::size_t pi = 0; pi < shard.pieces.size(); ++pi) {
    const auto& p = shard.pieces[pi];
    const mapped_file* f = in.files[p.file].get();
    uint64_t b = align_to_line(f->data(), f->size(), p.begin);
    uint64_t e = align_to_line(f->data(), f->size(), p.end);
    pieces.push_back({f, b, -1, 0});
    while (b < e) {
      uint64_t nb = b + block_bytes >= e ? e : align_to_line(f->data(), f->size(), b + block_bytes);
      if (nb > e) nb = e;
      blocks.push_back({static_cast<int>(pi), 0, f, b, nb});
      b = nb;
    }
  }
  return blocks;
}

// A block's bytes, read into memory with pread (mapped_file::read), then
// fast_parse_read_bound zero bytes, so that every line of the block may take
// the fast parser (it reads past a line's end; the zeros hold no '\n', so it
// refuses a last line without one, which parse_block then reports as
// truncated). Reading instead of
// scanning the mapping: the scan of 1M generated rows (251 MB, page cache)
// took 0.17 s from the mapping and 0.08 s read 1 MiB at a time into one
// buffer, the copy included, on the 2-core PVM guest (2026-12-06): each
// 4 KiB page of a mapping costs a TLB miss there, and the first touch a fault.
class block_bytes {
public:
  // Reads the block; `tail_hint`: the bytes tail() is likely to be asked
  // for, reserved with it (one range, no copy later).
  status load(const block& b, std::size_t max_field, std::size_t tail_hint = 0) {
    const std::size_t n = static_cast<std::size_t>(b.end - b.begin);
    const std::size_t pad = fast_parse_read_bound(max_field);
    char* p = buf_.reserve(head_of(n + pad) + tail_hint);
    std::memset(p + n, 0, pad);
    size_ = n;
    padded_ = n + pad;
    return b.file->read(b.begin, p, n);
  }
  const char* data() const noexcept { return buf_.data(); }
  std::size_t size() const noexcept { return size_; }
  // `n` bytes of room after the padded bytes (64-byte aligned), in the same
  // range: pass 1 keeps a block's records and row keys there, so that a
  // block of ~4k rows takes two 2 MiB pages instead of three ranges of
  // their own (see count_block_result). The bytes are kept (copied when the
  // range must grow). Uninitialised.
  char* tail(std::size_t n) {
    const std::size_t head = head_of(padded_);
    if (head + n > buf_.capacity()) {
      huge_buffer grown;
      std::memcpy(grown.reserve(head + n), buf_.data(), padded_);
      buf_ = std::move(grown);
    }
    return buf_.data() + head;
  }

private:
  static std::size_t head_of(std::size_t n) noexcept { return (n + 63) & ~std::size_t{63}; }
  huge_buffer buf_;
  std::size_t size_ = 0, padded_ = 0;
};

// Pass 1's room after a block's bytes (block_bytes::tail) for `rows` rows:
// their records, then their row keys (column-major, `rows` apart).
constexpr std::size_t records_room(std::size_t rows) noexcept {
  return (rows * sizeof(criteo_record) + 63) & ~std::size_t{63};
}
constexpr std::size_t count_tail_bytes(std::size_t rows) noexcept {
  return records_room(rows) + rows * sparse_columns * sizeof(uint64_t);
}

// What one block of pass 1 holds (an upper bound): its bytes read in (a
// block ends at the line end after block_bytes: one more field-bounded line)
// and the padding, then room for its most rows (a good line has >= 40
// bytes) of records and of row keys, in one range. For 1 MiB blocks 12 MiB;
// a block of Criteo's ~250-byte lines takes 4 (its rows are counted, or
// bounded by the densest block before; see count_pass).
uint64_t count_block_memory(const preprocess_options& opt) {
  const uint64_t longest_line = 14 * 20 + 26 * (uint64_t(opt.max_field_bytes) + 1);
  const uint64_t bytes = opt.block_bytes + longest_line;
  const uint64_t rows = bytes / 40 + 1;
  const uint64_t head = (bytes + fast_parse_read_bound(opt.max_field_bytes) + 63) & ~uint64_t{63};
  return huge_bytes(head + count_tail_bytes(rows));
}

// Parses every line of a loaded block: good(pl) for a good line, bad(line,
// index_in_block, error) for a malformed one; returns the number of lines.
// Lines go through parse_criteo_line_fast first; what it refuses (malformed,
// or merely unusual: a byte >= 0x80) goes through parse_criteo_line.
template <class Good, class Bad>
uint64_t parse_block(const block_bytes& bytes, std::size_t max_field, parsed_line& pl, Good&& good, Bad&& bad) {
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  const bool fast = max_field >= fast_parse_min_field;
  uint64_t n = 0;
  while (p < end) {
    if (fast) {
      if (const char* next = parse_criteo_line_fast(p, max_field, pl)) {
        good(pl);
        ++n;
        p = next;
        continue;
      }
    }
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    std::string_view line(p, static_cast<std::size_t>((nl ? nl : end) - p));
    parse_error e = nl ? parse_criteo_line(line, max_field, pl) : parse_error{malformed_kind::truncated, -1};
    if (e) bad(line, n, e);
    else good(pl);
    ++n;
    if (!nl) break;
    p = nl + 1;
  }
  return n;
}

struct hit {
  uint64_t line_in_block = 0;
  malformed_kind kind = malformed_kind::none;
  std::string detail;  // only for the first max_examples of a block
};

// A malformed line's hit; described only while the block may still supply
// examples (or under policy fail, which reports the first one).
inline hit make_hit(std::string_view line, uint64_t idx, const parse_error& e, std::size_t hits_so_far,
                    const preprocess_options& opt) {
  hit h{idx, e.kind, {}};
  if (hits_so_far < opt.max_examples || opt.policy == malformed_policy::fail)
    h.detail = describe_parse_error(line, e);
  return h;
}

// The serial stage's view of malformed lines: numbering and the report.
class malformed_sink {
public:
  malformed_sink(std::vector<piece_info>& pieces, const preprocess_options& opt)
      : pieces_(pieces), opt_(opt) {}

  // Takes a block's hits in order; returns an error under policy fail.
  status take(const block& b, uint64_t lines, std::vector<hit>& hits) {
    piece_info& pi = pieces_[b.piece];
    for (auto& h : hits) {
      ++report.total;
      ++report.by_kind[static_cast<int>(h.kind)];
      if (report.examples.size() < opt_.max_examples || opt_.policy == malformed_policy::fail) {
        if (pi.line_base < 0) pi.line_base = line_base_of(pi);
        malformed_example ex;
        ex.file = pi.file->path();
        ex.line = static_cast<uint64_t>(pi.line_base) + pi.lines_seen + h.line_in_block + 1;
        ex.kind = h.kind;
        ex.detail = std::move(h.detail);
        if (opt_.policy == malformed_policy::fail)
          return make_error(errc::parse_error,
                            ex.to_string() + " (malformed = \"fail\"; use \"skip\" to drop such lines)");
        report.examples.push_back(std::move(ex));
      }
    }
    pi.lines_seen += lines;
    return {};
  }

  malformed_report report;

private:
  // The line index of the piece's first line: counted from the nearest
  // piece of the same file before it whose index is known (count_ranges
  // makes a piece per range; from the file's start each time, twenty
  // examples could scan a large file twenty times).
  int64_t line_base_of(const piece_info& pi) const {
    const piece_info* near = nullptr;
    for (const auto& o : pieces_)
      if (o.file == pi.file && o.line_base >= 0 && o.begin <= pi.begin && (!near || o.begin > near->begin)) near = &o;
    const char* d = pi.file->data();
    if (!near) return static_cast<int64_t>(count_lines_before(d, pi.begin));
    return near->line_base + static_cast<int64_t>(std::count(d + near->begin, d + pi.begin, '\n'));
  }
  std::vector<piece_info>& pieces_;
  const preprocess_options& opt_;
};

constexpr int blocks_per_worker = 4;

status stopped() { return make_error(errc::cancelled, "stopped"); }

}  // namespace

// ---- input_set -----------------------------------------------------------------

expected<input_set> input_set::open(const std::vector<std::string>& paths) {
  input_set s;
  for (auto& p : paths) {
    auto m = mapped_file::open(p);
    if (!m) return m.error();
    s.files.push_back(std::move(*m));
  }
  return s;
}

std::vector<uint64_t> input_set::sizes() const {
  std::vector<uint64_t> v;
  for (auto& f : files) v.push_back(f->size());
  return v;
}

std::string part_file_name(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "part-%05d.bin", index);
  return buf;
}

// ---- pass 1 --------------------------------------------------------------------

namespace {

// One column's pass-1 table: the local id of every distinct string (handed
// out in order of first sight) and its count. Criteo's 8-hex-digit values go
// to a table keyed by their 32-bit value (hex_key.hpp) whose slot holds the
// count too (one cache line per row and column), the empty string (the
// missing value) to two fields, anything else to a string_key_map. A count
// cannot pass 2^32 - 1: a column is spilled once it has counted 2^31 rows
// (spill_rows), and one segment holds far fewer (a good line is at least 40
// bytes).
constexpr uint64_t spill_rows = uint64_t{1} << 31;
constexpr uint32_t no_local = ~uint32_t{0};

struct string_count {
  uint32_t local_plus1 = 0;  // 0: just inserted
  uint32_t count = 0;
};

struct column_table {
  hex_table hex;
  string_key_map<string_count> strings;
  uint32_t empty_local = no_local;
  uint32_t empty_count = 0;

  std::size_t size() const noexcept { return hex.size() + strings.size() + (empty_local != no_local); }
  std::size_t memory_bytes() const noexcept { return hex.memory_bytes() + strings.memory_bytes(); }
  void clear_and_release() {
    hex.clear_and_release();
    strings.clear_and_release();
    empty_local = no_local;
    empty_count = 0;
  }
};

// A column's row key in a block: the hex value (< 2^32), the empty string,
// or other_key + the index of the string in the block's others of that column.
static_assert(sparse_columns % 2 == 0, "row_keys converts hex ids in pairs");
constexpr uint64_t empty_key = uint64_t{1} << 32;
constexpr uint64_t other_key = uint64_t{2} << 32;

inline uint64_t other_row_key(std::string_view s, std::vector<std::string_view>& others) {
  if (s.empty()) return empty_key;
  others.push_back(s);
  return other_key | (others.size() - 1);
}

// The row keys of a line's 26 strings, to keys[c * stride]; hex ids two at a
// time (hex8_value2).
inline void row_keys(const parsed_line& pl, uint64_t* keys, std::size_t stride,
                     std::array<std::vector<std::string_view>, sparse_columns>& others) {
  uint64_t w[sparse_columns];
  for (int c = 0; c < sparse_columns; ++c) {
    w[c] = 0;  // not 8 bytes: not hex (a 0 byte is no hex digit)
    if (pl.sparse[c].size() == 8) std::memcpy(&w[c], pl.sparse[c].data(), 8);
  }
  for (int c = 0; c < sparse_columns; c += 2) {
    uint32_t v0, v1;
    bool ok0, ok1;
    hex8_value2(w[c], w[c + 1], v0, ok0, v1, ok1);
    keys[c * stride] = ok0 ? v0 : other_row_key(pl.sparse[c], others[c]);
    keys[(c + 1) * stride] = ok1 ? v1 : other_row_key(pl.sparse[c + 1], others[c + 1]);
  }
}

struct hex_entry {
  uint32_t key, local, count;
};

// Sorts by key (LSD radix, 11 bits a pass; keys are distinct).
void sort_by_key(big_vector<hex_entry>& v) {
  if (v.size() < 1024) {
    std::sort(v.begin(), v.end(), [](const hex_entry& x, const hex_entry& y) { return x.key < y.key; });
    return;
  }
  // The scratch half left uninitialised (every entry is written by the
  // first pass; a value-initialised vector zeroed it first, 3% of the
  // 2-node merge's CPU in a profile). Three passes (11, 11 and 10 bits;
  // until 2026-12-06 four of 8 bits: the sort took 8.8% of the 2-node
  // merge's CPU); the result is in the scratch, copied back.
  static_assert(std::is_trivially_copyable_v<hex_entry>);
  constexpr int bits = 11;
  constexpr std::size_t buckets = std::size_t{1} << bits;
  huge_buffer scratch;
  hex_entry* a = v.data();
  hex_entry* b = reinterpret_cast<hex_entry*>(scratch.reserve(v.size() * sizeof(hex_entry)));
  std::vector<uint32_t> hist(3 * buckets, 0);
  for (const hex_entry& e : v)
    for (int k = 0; k < 3; ++k) ++hist[std::size_t(k) * buckets + ((e.key >> (bits * k)) & (buckets - 1))];
  for (int k = 0; k < 3; ++k) {
    uint32_t* h = hist.data() + std::size_t(k) * buckets;
    uint32_t sum = 0;
    for (std::size_t j = 0; j < buckets; ++j) sum += std::exchange(h[j], sum);
    const int shift = bits * k;
    for (std::size_t i = 0, n = v.size(); i < n; ++i) b[h[(a[i].key >> shift) & (buckets - 1)]++] = a[i];
    std::swap(a, b);
  }
  std::memcpy(static_cast<void*>(v.data()), a, v.size() * sizeof(hex_entry));
}

// A sorted source of (string, count, local id).
class local_source {
public:
  virtual ~local_source() = default;
  virtual bool next(std::string_view& s, uint64_t& count, uint32_t& local) = 0;
  // count_stream::next_hex, with local ids.
  virtual std::size_t next_hex(uint32_t* values, uint64_t* counts, uint32_t* locals, std::size_t max) {
    (void)values, (void)counts, (void)locals, (void)max;
    return 0;
  }
  virtual status error() const { return {}; }
};

// A hex table's entries counted at least drop_below times, in table order.
big_vector<hex_entry> hex_entries(const hex_table& h, uint64_t drop_below = 0) {
  big_vector<hex_entry> v;
  if (drop_below > 1) {
    std::size_t kept = 0;
    h.for_each([&](uint32_t, uint32_t, uint32_t count) { kept += count >= drop_below; });
    v.reserve(kept);
  } else {
    v.reserve(h.size());
  }
  h.for_each([&](uint32_t key, uint32_t local, uint32_t count) {
    if (count >= drop_below) v.push_back({key, local, count});
  });
  return v;
}

// The same in increasing value order.
big_vector<hex_entry> sorted_hex_entries(const hex_table& h, uint64_t drop_below = 0) {
  big_vector<hex_entry> v = hex_entries(h, drop_below);
  sort_by_key(v);
  return v;
}

// A column table sorted without building strings, three sorted runs merged
// on the fly: the hex values (numeric order = the strings' order), the other
// small keys as (bswap(lo), bswap(hi)) - bytes 0..14 big-endian, then the
// length: the same order as the strings (shorter ones are zero-padded) - and
// the long strings. The empty string sorts first. The three runs hold
// disjoint strings. A copy: the table can be cleared after. Entries counted
// fewer than drop_below times are left out (preprocess_options::drop_below;
// only for a table that holds its strings' whole counts, i.e. a column never
// spilled): in a job's only shard most strings are that rare (1.5M of 1.9M
// on 1M Criteo rows at min_count 3), and the sort and the merge skip them.
class table_source final : public local_source {
public:
  explicit table_source(const column_table& t, uint64_t drop_below = 0) : hex_(sorted_hex_entries(t.hex, drop_below)) {
    for (const auto& sl : t.strings.small_slots())
      if (sl.key.hi != small_key_empty_hi && sl.value.count >= drop_below)
        small_.push_back({__builtin_bswap64(sl.key.lo), __builtin_bswap64(sl.key.hi), sl.value.local_plus1 - 1,
                          sl.value.count});
    std::sort(small_.begin(), small_.end(),
              [](const sortable& x, const sortable& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
    for (auto& [k, v] : t.strings.long_entries())
      if (v.count >= drop_below) long_.push_back({k, v.local_plus1 - 1, v.count});
    std::sort(long_.begin(), long_.end(), [](const auto& x, const auto& y) { return x.s < y.s; });
    if (t.empty_local != no_local && t.empty_count >= drop_below) {
      empty_local_ = t.empty_local;
      empty_count_ = t.empty_count;
    }
    dropped_ = t.size() - hex_.size() - small_.size() - long_.size() - (empty_local_ != no_local);
  }
  // Entries left out (drop_below).
  uint64_t dropped() const noexcept { return dropped_; }
  // Once the empty string and the other strings are out, the rest are hex
  // values, sorted: straight from the array.
  std::size_t next_hex(uint32_t* values, uint64_t* counts, uint32_t* locals, std::size_t max) override {
    if (empty_local_ != no_local || small_.size() != i_ || long_.size() != j_) return 0;
    const std::size_t n = std::min(max, hex_.size() - h_);
    for (std::size_t k = 0; k < n; ++k) {
      const hex_entry& e = hex_[h_ + k];
      values[k] = e.key;
      counts[k] = e.count;
      locals[k] = e.local;
    }
    h_ += n;
    return n;
  }
  bool next(std::string_view& s, uint64_t& count, uint32_t& local) override {
    if (empty_local_ != no_local) {
      local = std::exchange(empty_local_, no_local);
      s = std::string_view(hex_buf_, 0);
      count = empty_count_;
      return true;
    }
    if (small_.size() == i_ && long_.size() == j_) {  // hex values only (Criteo's case)
      if (h_ == hex_.size()) return end();
      const hex_entry& e = hex_[h_++];
      hex8_chars(e.key, hex_buf_);
      s = std::string_view(hex_buf_, 8);
      count = e.count;
      local = e.local;
      return true;
    }
    int which = -1;  // 0 hex, 1 small, 2 long
    if (h_ < hex_.size()) {
      hex8_chars(hex_[h_].key, hex_buf_);
      s = std::string_view(hex_buf_, 8);
      which = 0;
    }
    if (i_ < small_.size()) {
      const sortable& e = small_[i_];
      small_key k{__builtin_bswap64(e.a), __builtin_bswap64(e.b)};
      std::string_view v(small_buf_, small_key_bytes(k, small_buf_));
      if (which < 0 || v < s) {
        s = v;
        which = 1;
      }
    }
    if (j_ < long_.size() && (which < 0 || std::string_view(long_[j_].s) < s)) {
      s = long_[j_].s;
      which = 2;
    }
    switch (which) {
      case 0:
        count = hex_[h_].count;
        local = hex_[h_++].local;
        return true;
      case 1:
        count = small_[i_].count;
        local = small_[i_++].local;
        return true;
      case 2:
        count = long_[j_].count;
        local = long_[j_++].local;
        return true;
      default: return end();
    }
  }

private:
  struct sortable {
    uint64_t a, b;
    uint32_t local, count;
  };
  struct long_entry {
    std::string s;
    uint32_t local, count;
  };
  bool end() {  // release as soon as consumed
    big_vector<hex_entry>().swap(hex_);
    std::vector<sortable>().swap(small_);
    std::vector<long_entry>().swap(long_);
    h_ = i_ = j_ = 0;
    return false;
  }
  big_vector<hex_entry> hex_;
  std::vector<sortable> small_;
  std::vector<long_entry> long_;
  uint32_t empty_local_ = no_local;
  uint32_t empty_count_ = 0;
  uint64_t dropped_ = 0;
  std::size_t h_ = 0, i_ = 0, j_ = 0;
  char hex_buf_[8];
  char small_buf_[16];
};

// Spilled run files: u16 length | bytes | u64 count | u32 local id.
status write_local_run(const std::string& path, local_source& src) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error(errc::io_error, "cannot create spill file " + path);
  std::vector<char> buf;
  buf.reserve((1 << 20) + 128);
  bool ok = true;
  std::string_view s;
  uint64_t count;
  uint32_t local;
  while (src.next(s, count, local)) {
    uint16_t len = static_cast<uint16_t>(s.size());
    std::size_t at = buf.size();
    buf.resize(at + 14 + s.size());
    std::memcpy(buf.data() + at, &len, 2);
    std::memcpy(buf.data() + at + 2, s.data(), s.size());
    std::memcpy(buf.data() + at + 2 + s.size(), &count, 8);
    std::memcpy(buf.data() + at + 10 + s.size(), &local, 4);
    if (buf.size() >= (1 << 20)) {
      ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
      buf.clear();
    }
  }
  ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return make_error(errc::io_error, "cannot write spill file " + path + " (disk full?)");
  return {};
}

class run_source final : public local_source {
public:
  explicit run_source(std::string path) : path_(std::move(path)) {
    f_ = std::fopen(path_.c_str(), "rb");
    if (!f_) err_ = make_error(errc::io_error, "cannot open spill file " + path_);
    else std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  }
  ~run_source() override {
    if (f_) std::fclose(f_);
  }
  bool next(std::string_view& s, uint64_t& count, uint32_t& local) override {
    if (!f_ || !err_.ok()) return false;
    uint16_t len;
    std::size_t got = std::fread(&len, 1, 2, f_);
    if (got == 0 && std::feof(f_)) return false;
    buf_.resize(len);
    if (got != 2 || std::fread(buf_.data(), 1, len, f_) != len || std::fread(&count, 1, 8, f_) != 8 ||
        std::fread(&local, 1, 4, f_) != 4) {
      err_ = make_error(errc::io_error, "spill file " + path_ + " is truncated");
      return false;
    }
    s = std::string_view(buf_.data(), len);
    return true;
  }
  status error() const override { return err_; }

private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<char> buf_;
  status err_;
};

// What column_stream() hands out for a column and what finish_shard() needs.
constexpr uint32_t dropped_owner = ~uint32_t{0};  // a local id whose string was dropped (OOV)
struct column_ids {
  big_vector<uint32_t> owner;  // local id -> index of its entry in the column's stream, or dropped_owner
  uint64_t entries = 0;         // entries the stream yielded
  uint64_t dropped = 0;         // strings (= local ids: an unspilled table) left out of the stream
  bool streamed = false;        // the stream reached its end
  big_vector<int32_t> ids;     // entry -> id (-1 = OOV), from the merge
  int32_t oov = -1;
};

// A column's sources merged (summing equal strings), noting each local id's entry.
class column_stream_impl final : public count_stream {
public:
  column_stream_impl(std::vector<std::unique_ptr<local_source>> src, column_ids& ids)
      : src_(std::move(src)), ids_(ids), cur_(src_.size()) {
    if (src_.size() > 1)
      for (std::size_t i = 0; i < src_.size(); ++i) advance(i);
  }
  bool next(std::string_view& s, uint64_t& count) override {
    uint32_t local;
    if (src_.size() == 1) {
      if (!src_[0]->next(s, count, local)) return end();
      note(local);
      ++ids_.entries;
      return true;
    }
    if (heap_.empty()) return end();
    std::pop_heap(heap_.begin(), heap_.end(), greater{&cur_});
    std::size_t i = heap_.back();
    heap_.pop_back();
    out_.swap(cur_[i].s);
    uint64_t total = cur_[i].count;
    note(cur_[i].local);
    advance(i);
    while (!heap_.empty() && key_equal(cur_[heap_.front()].s, out_)) {
      std::pop_heap(heap_.begin(), heap_.end(), greater{&cur_});
      std::size_t j = heap_.back();
      heap_.pop_back();
      total += cur_[j].count;
      note(cur_[j].local);
      advance(j);
    }
    ++ids_.entries;
    s = out_;
    count = total;
    return true;
  }
  // One source (no spill): its hex entries in bulk, each noted as next() does.
  std::size_t next_hex(uint32_t* values, uint64_t* counts, std::size_t max) override {
    if (src_.size() != 1) return 0;
    if (locals_.size() < max) locals_.resize(max);
    const std::size_t n = src_[0]->next_hex(values, counts, locals_.data(), max);
    for (std::size_t k = 0; k < n; ++k) {
      note(locals_[k]);
      ++ids_.entries;
    }
    return n;
  }
  status error() const override {
    if (!err_.ok()) return err_;
    for (auto& in : src_)
      if (auto e = in->error(); !e.ok()) return e;
    return {};
  }
  uint64_t dropped() const override { return ids_.dropped; }

private:
  struct head {
    std::string s;
    uint64_t count = 0;
    uint32_t local = 0;
  };
  struct greater {
    const std::vector<head>* cur;
    bool operator()(std::size_t a, std::size_t b) const {
      int c = key_compare((*cur)[a].s, (*cur)[b].s);
      return c != 0 ? c > 0 : a > b;
    }
  };
  bool end() {
    if (error().ok()) ids_.streamed = true;
    return false;
  }
  void note(uint32_t local) {
    if (local < ids_.owner.size()) ids_.owner[local] = static_cast<uint32_t>(ids_.entries);
    else err_ = make_error(errc::internal, "a local id out of range in a count stream");
  }
  void advance(std::size_t i) {
    std::string_view s;
    if (src_[i]->next(s, cur_[i].count, cur_[i].local)) {
      cur_[i].s.assign(s);
      heap_.push_back(i);
      std::push_heap(heap_.begin(), heap_.end(), greater{&cur_});
    }
  }
  std::vector<std::unique_ptr<local_source>> src_;
  column_ids& ids_;
  std::vector<head> cur_;
  std::vector<std::size_t> heap_;
  std::string out_;
  std::vector<uint32_t> locals_;  // next_hex's local ids
  status err_;
};

}  // namespace

struct shard_counts::impl {
  std::array<column_table, sparse_columns> tables;
  std::array<uint32_t, sparse_columns> next_local{};
  std::array<uint64_t, sparse_columns> rows_in_table{};  // rows counted since the last spill
  std::array<std::vector<std::string>, sparse_columns> runs;  // spilled run files
  // Tables sorted at the end of pass 1 (with defer_sort, only those that
  // cannot merge by hashing).
  std::array<std::unique_ptr<table_source>, sparse_columns> sorted;
  std::array<column_ids, sparse_columns> ids;
  std::array<bool, sparse_columns> handed{};  // column_stream, export_column or merge_hashed took the column
  // export_candidates .. finish_candidates (a merge by count threshold).
  struct threshold_state {
    uint64_t min_local = 0;             // 0: the column was not exported so
    big_vector<hex_entry> candidates;  // what it sent, by value
    big_vector<hex_entry> hits;        // what it answered, by value
    bool asked = false;                 // last_asked is set
    uint32_t last_asked = 0;
    bool finished = false;
  };
  std::array<threshold_state, sparse_columns> threshold;
  std::string spill_dir;
  int spill_seq = 0;
  // Staged pass 1: the records go to staged_path + ".tmp" by pwrite(); pass
  // 2 reads them back chunk by chunk, remaps their ids and writes them over.
  // (Through a shared mapping of the .tmp instead, until 2026-11-29, the
  // first touch of each page cost more: on dev-2c-xeon, 1M rows on 2 nodes,
  // counting 0.375 s against 0.317 s a node after a pause, and 10M rows
  // 4.6-5.3 s against 3.8-4.1 s end to end: bench/RESULTS.md.)
  // One staged part per slice of the input the shard counted: one for
  // count_shard, one per run of contiguous ranges for count_ranges (a range
  // that continues a part's last one joins it).
  struct staged_part {
    std::string path;   // the final part file ("" until set_part_path, count_ranges)
    std::string tmp;    // written here, renamed to path by finish_shard
    int fd = -1;
    uint64_t records = 0;    // staged so far (write offsets): its rows
    uint64_t key = 0;        // count_ranges: the first byte of its first range
    uint64_t next_begin = 0; // count_ranges: where a range continuing it starts
    uint64_t bytes = 0;      // input bytes counted into it
    bool finished = false;
  };
  std::vector<staged_part> parts;
  bool staging = false;
  shard_result staged;  // rows, lines, bytes, malformed; seconds = pass 1
  int dop = 1;
  bool finished = false;
  // Removes a previous run's staged_path while pass 1 runs (see count_shard);
  // joined before the .tmp takes its place.
  std::thread remove_previous;

  void join_remove_previous() {
    if (remove_previous.joinable()) remove_previous.join();
  }

  // Column c's table as a sorted stream source, its memory released
  // (strings counted fewer than drop_below times left out).
  void sort_table(int c, uint64_t drop_below) {
    sorted[c] = std::make_unique<table_source>(tables[c], drop_below);
    tables[c].clear_and_release();
  }
  uint64_t table_bytes() const {
    uint64_t b = 0;
    for (auto& t : tables) b += t.memory_bytes();
    return b;
  }

  status spill_column(int c) {
    if (spill_dir.empty())
      return make_error(errc::out_of_memory,
                        "vocabulary counts exceed the memory cap and no spill directory is set");
    std::error_code ec;
    fs::create_directories(spill_dir, ec);
    char name[64];
    std::snprintf(name, sizeof name, "/c%02d-%06d.run", c, spill_seq++);
    std::string path = spill_dir + name;
    table_source src(tables[c]);
    tables[c].clear_and_release();
    rows_in_table[c] = 0;
    if (auto s = write_local_run(path, src); !s.ok()) return s;
    runs[c].push_back(path);
    return {};
  }

  // Spills the largest columns until the tables hold at most cap / 2.
  status enforce_cap(uint64_t cap, uint64_t& spills) {
    uint64_t total = table_bytes();
    if (total <= cap) return {};
    while (total > cap / 2) {
      int big = 0;
      for (int c = 1; c < sparse_columns; ++c)
        if (tables[c].memory_bytes() > tables[big].memory_bytes()) big = c;
      if (tables[big].size() == 0) break;
      if (auto s = spill_column(big); !s.ok()) return s;
      ++spills;
      total = table_bytes();
    }
    return {};
  }

  ~impl() {
    join_remove_previous();
    std::error_code ec;
    for (auto& rs : runs)
      for (auto& r : rs) fs::remove(r, ec);
    for (auto& p : parts) {
      if (p.fd < 0) continue;
      ::close(p.fd);
      if (!p.finished) ::unlink(p.tmp.c_str());
    }
  }
};

shard_counts::shard_counts() : impl_(std::make_unique<impl>()) {}
shard_counts::~shard_counts() = default;
shard_counts::shard_counts(shard_counts&&) noexcept = default;
shard_counts& shard_counts::operator=(shard_counts&&) noexcept = default;

std::unique_ptr<count_stream> shard_counts::column_stream(int c) {
  std::vector<std::unique_ptr<local_source>> parts;
  for (auto& r : impl_->runs[c]) parts.push_back(std::make_unique<run_source>(r));
  auto& ids = impl_->ids[c];
  ids.dropped = 0;
  if (impl_->sorted[c]) {
    ids.dropped = impl_->sorted[c]->dropped();
    parts.push_back(std::move(impl_->sorted[c]));
  } else {
    parts.push_back(std::make_unique<table_source>(impl_->tables[c]));
  }
  impl_->tables[c].clear_and_release();
  impl_->handed[c] = true;
  // A local id the stream does not note was dropped (finish_shard() checks
  // that exactly ids.dropped are).
  ids.owner.assign(impl_->next_local[c], dropped_owner);
  ids.entries = 0;
  ids.streamed = false;
  return std::make_unique<column_stream_impl>(std::move(parts), ids);
}

void shard_counts::add_column_ids(int c, const int32_t* ids, std::size_t n) {
  impl_->ids[c].ids.insert(impl_->ids[c].ids.end(), ids, ids + n);
}

uint64_t shard_counts::column_size(int c) const {
  return impl_ && c >= 0 && c < sparse_columns ? impl_->next_local[std::size_t(c)] : 0;
}

void shard_counts::set_oov_id(int c, int32_t oov_id) { impl_->ids[c].oov = oov_id; }

bool shard_counts::hashable(int c) const {
  if (!impl_ || c < 0 || c >= sparse_columns) return false;
  const auto& im = *impl_;
  return !im.handed[c] && im.runs[c].empty() && !im.sorted[c] && im.tables[c].strings.size() == 0;
}

void shard_counts::sort_deferred(uint32_t columns, int parallelism) {
  if (!impl_) return;
  auto& im = *impl_;
  tbb::task_arena arena(std::max(1, parallelism));
  arena.execute([&] {
    tbb::parallel_for(0, sparse_columns, [&](int c) {
      if (((columns >> c) & 1u) && hashable(c)) im.sort_table(c, 0);  // several shards: nothing dropped
    });
  });
}

namespace {

// The empty string's entries in a merge: whether any shard saw it, and its
// total count.
std::pair<bool, uint64_t> empty_string_total(const column_table& t, const std::vector<const hex_column*>& others) {
  bool seen = t.empty_local != no_local;
  uint64_t total = seen ? t.empty_count : 0;
  for (const hex_column* o : others)
    if (o->has_empty) {
      seen = true;
      total += o->empty_count;
    }
  return {seen, total};
}

// A merged column's own ids are set (ids[local]): each local id is its own
// entry, `covered` of them were set (all, or the merge lost some), OOV id
// `oov`.
status settle_own_ids(column_ids& ci, uint32_t locals, uint64_t covered, int32_t oov, const std::string& col) {
  if (covered != locals)
    return make_error(errc::internal, col + ": " + std::to_string(covered) + " entries for " +
                                          std::to_string(locals) + " local ids");
  for (uint32_t l = 0; l < locals; ++l) ci.owner[l] = l;
  ci.entries = locals;
  ci.dropped = 0;
  ci.streamed = true;
  ci.oov = oov;
  return {};
}

// Whether a hex column's values increase strictly (export_column's order).
bool values_increase(const hex_column& h) {
  for (std::size_t j = 1; j < h.values(); ++j)
    if (h.pairs[2 * j] <= h.pairs[2 * j - 2]) return false;
  return true;
}

}  // namespace

expected<hex_column> shard_counts::export_column(int c) {
  if (!hashable(c)) return make_error(errc::internal, "column C" + std::to_string(c + 1) + " cannot merge by hashing");
  auto& im = *impl_;
  column_table& t = im.tables[c];
  auto& ci = im.ids[c];
  hex_column out;
  // In increasing value order: the merging shard then merges sorted arrays
  // in one pass (merge_hashed), and the sort is spread over the shards.
  // The table goes before the sort and the arrays below are allocated: they
  // then take its pages, where fresh ones cost the first big column ~1 ms a
  // MiB on a VM (huge pages the host must back again).
  big_vector<hex_entry> sorted = hex_entries(t.hex);
  t.hex.clear_and_release();
  ci.owner.assign(im.next_local[c], dropped_owner);
  if (t.empty_local != no_local) {
    out.has_empty = true;
    out.empty_count = t.empty_count;
    ci.owner[t.empty_local] = 0;
  }
  sort_by_key(sorted);
  out.pairs.resize(2 * sorted.size());
  uint32_t* w = out.pairs.data();
  uint32_t e = out.has_empty ? 1 : 0;
  for (const hex_entry& x : sorted) {
    *w++ = x.key;
    *w++ = x.count;
    ci.owner[x.local] = e++;
  }
  ci.entries = e;
  ci.dropped = 0;
  ci.streamed = true;
  t.clear_and_release();
  im.handed[c] = true;
  return out;
}

expected<hex_column> shard_counts::export_candidates(int c, uint64_t min_local) {
  if (!hashable(c)) return make_error(errc::internal, "column C" + std::to_string(c + 1) + " cannot merge by hashing");
  auto& im = *impl_;
  column_table& t = im.tables[c];
  auto& th = im.threshold[c];
  th.min_local = std::max<uint64_t>(min_local, 1);
  hex_column out;
  out.sketch.assign(sketch_registers, 0);
  // One scan, without a branch per entry, into room for every entry
  // (uninitialised: only the pages it fills are touched).
  std::unique_ptr<hex_entry[]> room(new hex_entry[t.hex.size() + 1]);
  hex_entry* w0 = room.get();
  uint8_t* sk = out.sketch.data();
  const uint64_t min = th.min_local;
  t.hex.for_each([&](uint32_t key, uint32_t local, uint32_t count) {
    sketch_add(sk, key);
    *w0 = {key, local, count};
    w0 += count >= min;
  });
  const auto n = static_cast<std::size_t>(w0 - room.get());
  th.candidates.assign(room.get(), w0);
  room.reset();
  sort_by_key(th.candidates);
  out.pairs.resize(2 * n);
  uint32_t* w = out.pairs.data();
  for (const hex_entry& x : th.candidates) {
    *w++ = x.key;
    *w++ = x.count;
  }
  if (t.empty_local != no_local) {
    out.has_empty = true;
    out.empty_count = t.empty_count;
  }
  im.handed[c] = true;
  return out;
}

status shard_counts::answer_queries(int c, const uint32_t* pairs, std::size_t n, hex_column& hits) {
  const std::string col = "column C" + std::to_string(c + 1);
  auto& im = *impl_;
  auto& th = im.threshold[std::size_t(c)];
  if (th.min_local == 0 || th.finished) return make_error(errc::internal, col + ": asked for counts it was not exported for");
  std::string bad;
  im.tables[c].hex.find_each(pairs, n, [&](std::size_t k, const hex_table::slot* sl) {
    const uint32_t v = pairs[2 * k];
    if (th.asked && v <= th.last_asked && bad.empty()) bad = "asked values that do not increase";
    th.asked = true;
    th.last_asked = v;
    if (!sl) return;
    if (sl->count >= th.min_local && bad.empty()) bad = "asked for a value it sent";
    th.hits.push_back({v, sl->local_plus1 - 1, sl->count});
    hits.pairs.push_back(v);
    hits.pairs.push_back(sl->count);
  });
  if (!bad.empty()) return make_error(errc::internal, col + ": " + bad);
  return {};
}

status shard_counts::finish_candidates(int c) {
  auto& im = *impl_;
  auto& th = im.threshold[std::size_t(c)];
  column_table& t = im.tables[c];
  auto& ci = im.ids[c];
  if (th.min_local == 0 || th.finished)
    return make_error(errc::internal, "column C" + std::to_string(c + 1) + ": not exported for a threshold merge");
  const uint32_t locals = im.next_local[c];
  ci.owner.assign(locals, dropped_owner);
  uint32_t e = 0;
  if (t.empty_local != no_local) ci.owner[t.empty_local] = e++;
  // Candidates and hits in value order (the merger's order of the ids).
  std::size_t a = 0, b = 0;
  const auto& ca = th.candidates;
  const auto& hi = th.hits;
  while (a < ca.size() || b < hi.size()) {
    const bool take_a = b == hi.size() || (a < ca.size() && ca[a].key < hi[b].key);
    ci.owner[(take_a ? ca[a++] : hi[b++]).local] = e++;
  }
  ci.entries = e;
  ci.dropped = locals - e;
  ci.streamed = true;
  th = {};
  th.finished = true;
  t.clear_and_release();
  return {};
}

namespace {

// merge_hashed when every other's values increase: this shard's table
// sorted, then one pass over every input at once.
expected<column_merge_stats> merge_sorted(shard_counts::impl& im, int c, const std::vector<const hex_column*>& others,
                                          uint64_t min_count,
                                          const std::function<void(std::string_view, uint64_t)>& keep,
                                          std::vector<big_vector<int32_t>>& other_ids) {
  const std::string col = "column C" + std::to_string(c + 1);
  column_table& t = im.tables[c];
  auto& ci = im.ids[c];
  const uint32_t locals = im.next_local[c];
  big_vector<hex_entry> own = hex_entries(t.hex);
  t.hex.clear_and_release();  // before the sort's scratch (export_column)
  sort_by_key(own);
  const auto [empty_seen, empty_total] = empty_string_total(t, others);
  column_merge_stats st;
  st.distinct = empty_seen ? 1 : 0;
  // Ids in merge order: byte order (the empty string first, then the values
  // in numeric order = byte order).
  int32_t next = 0, empty_id = -1;
  if (empty_seen && empty_total >= min_count) {
    empty_id = next++;
    keep(std::string_view("", 0), empty_total);  // a non-null pointer: add() memcpys it
  }
  ci.owner.resize(locals);
  ci.ids.assign(locals, -1);
  uint64_t covered = 0;
  if (t.empty_local != no_local) {
    ci.ids[t.empty_local] = empty_id;
    ++covered;
  }
  other_ids.assign(others.size(), {});
  for (std::size_t k = 0; k < others.size(); ++k) {
    other_ids[k].resize(others[k]->entries());
    if (others[k]->has_empty) other_ids[k][0] = empty_id;
  }
  // One pass over every input at once: input 0 is this shard's entries,
  // input k + 1 others[k]'s values; at[i]: its next entry.
  constexpr uint64_t done = uint64_t{1} << 32;  // past every value
  const std::size_t inputs = others.size() + 1;
  std::vector<std::size_t> at(inputs, 0);
  auto value_of = [&](std::size_t i) -> uint64_t {
    if (i == 0) return at[0] < own.size() ? own[at[0]].key : done;
    const hex_column& o = *others[i - 1];
    return at[i] < o.values() ? o.pairs[2 * at[i]] : done;
  };
  std::vector<uint64_t> head(inputs);
  for (std::size_t i = 0; i < inputs; ++i) head[i] = value_of(i);
  char buf[8];
  for (;;) {
    const uint64_t v = *std::min_element(head.begin(), head.end());
    if (v == done) break;
    uint64_t total = 0;
    for (std::size_t i = 0; i < inputs; ++i) {
      if (head[i] != v) continue;
      total += i == 0 ? own[at[0]].count : others[i - 1]->pairs[2 * at[i] + 1];
    }
    ++st.distinct;
    int32_t id = -1;
    if (total >= min_count) {
      if (next >= INT32_MAX - 1)  // ids, the OOV id and the empty string's fit int32
        return make_error(errc::out_of_memory, col + ": more than 2^31-2 kept strings; use hash mode");
      id = next++;
      hex8_chars(static_cast<uint32_t>(v), buf);
      keep(std::string_view(buf, 8), total);
    }
    for (std::size_t i = 0; i < inputs; ++i) {
      if (head[i] != v) continue;
      if (i == 0) {
        ci.ids[own[at[0]].local] = id;
        ++covered;
      } else {
        other_ids[i - 1][at[i] + (others[i - 1]->has_empty ? 1 : 0)] = id;
      }
      ++at[i];
      head[i] = value_of(i);
    }
  }
  st.kept = static_cast<uint64_t>(next);
  HF_RETURN_IF_ERROR(settle_own_ids(ci, locals, covered, next, col));
  t.clear_and_release();
  return st;
}

// Sorts (value << 32 | number) entries by value (LSD radix on the top 32 bits,
// 11 bits a pass; values are distinct).
void sort_by_value(big_vector<uint64_t>& v) {
  if (v.size() < 4096) {
    std::sort(v.begin(), v.end());
    return;
  }
  big_vector<uint64_t> tmp(v.size());
  std::vector<uint32_t> hist(3 * 2048, 0);
  for (uint64_t e : v)
    for (int k = 0; k < 3; ++k) ++hist[std::size_t(k) * 2048 + ((e >> (32 + 11 * k)) & 0x7ff)];
  for (int k = 0; k < 3; ++k) {
    uint32_t* h = hist.data() + std::size_t(k) * 2048;
    uint32_t sum = 0;
    for (int b = 0; b < 2048; ++b) sum += std::exchange(h[b], sum);
    const int shift = 32 + 11 * k;
    for (uint64_t e : v) tmp[h[(e >> shift) & 0x7ff]++] = e;
    v.swap(tmp);
  }
}

}  // namespace

expected<column_merge_stats> shard_counts::merge_hashed(int c, const std::vector<const hex_column*>& others,
                                                        uint64_t min_count,
                                                        const std::function<void(std::string_view, uint64_t)>& keep,
                                                        std::vector<big_vector<int32_t>>& other_ids) {
  const std::string col = "column C" + std::to_string(c + 1);
  if (!hashable(c)) return make_error(errc::internal, col + " cannot merge by hashing");
  auto& im = *impl_;
  column_table& t = im.tables[c];
  hex_table& h = t.hex;
  im.handed[c] = true;
  if (std::all_of(others.begin(), others.end(), [](const hex_column* o) { return values_increase(*o); }))
    return merge_sorted(im, c, others, min_count, keep, other_ids);
  // Others in any other order: added to this table; where[k][j]: the slot of
  // others[k]'s j-th value.
  // Grown once up front when the others' entries would take the table well
  // past its limit: growing midway rehashes it and then looks every added
  // entry up again. (Each entry added may be new: the bound. Shards share
  // many strings, so when the bound passes the limit by little, the table
  // may never need to grow: it is left to add_run.)
  // With more than one other shard the bound (no two shards sharing a
  // string) can be many times the union: add_run grows as needed then.
  std::size_t bound = h.size();
  for (const hex_column* o : others) bound += o->values();
  if (others.size() == 1 && bound > h.capacity() / 10 * 8) h.reserve(bound);
  std::vector<big_vector<uint32_t>> where(others.size());
  bool regrown = false;
  for (std::size_t k = 0; k < others.size(); ++k) {
    const hex_column& o = *others[k];
    where[k].resize(o.values());
    if (!h.add_run(o.pairs.data(), o.values(), where[k].data(), regrown))
      return make_error(errc::out_of_memory, col + ": a string counted 2^32 times or more; merge by sorting");
  }
  // Slot indices are 32 bits here (where, and the kept entries' low word).
  if (h.capacity() > (std::size_t{1} << 32))
    return make_error(errc::out_of_memory, col + ": more than 2^32 table slots; merge by sorting");
  if (regrown)
    for (std::size_t k = 0; k < others.size(); ++k) h.find_run(others[k]->pairs.data(), others[k]->values(), where[k].data());
  const auto [empty_seen, empty_total] = empty_string_total(t, others);
  // One pass over the table (a random access per kept entry afterwards cost
  // more than the rest of the merge: ~70 ns each on the 2-core VM). Each
  // kept entry is numbered in scan order: kept holds (value << 32 | number),
  // kept_count its count, its slot's local_plus1 then the number + 1 (0:
  // OOV; the table is not probed after this scan), and this shard's ids
  // array the number (-1: OOV) until the numbers become ids below.
  hex_table::slot* sl = h.slot_data();
  const std::size_t cap = h.capacity();
  auto& ci = im.ids[c];
  const uint32_t locals = im.next_local[c];
  ci.owner.resize(locals);
  ci.ids.assign(locals, -1);  // the empty string's entry (not in the table) is set below
  big_vector<uint64_t> kept;
  big_vector<uint32_t> kept_count;
  column_merge_stats st;
  st.distinct = empty_seen ? 1 : 0;
  uint64_t covered = 0;
  for (std::size_t i = 0; i < cap; ++i) {
    const uint32_t lp = sl[i].local_plus1;
    if (lp == 0) continue;
    ++st.distinct;
    int32_t number = -1;
    if (sl[i].count >= min_count) {
      if (kept.size() >= static_cast<uint64_t>(INT32_MAX) - 1)  // ids, the OOV id and the empty string's fit int32
        return make_error(errc::out_of_memory, col + ": more than 2^31-2 kept strings; use hash mode");
      number = static_cast<int32_t>(kept.size());
      kept.push_back(uint64_t{sl[i].key} << 32 | static_cast<uint32_t>(kept.size()));
      kept_count.push_back(sl[i].count);
    }
    if (lp != hex_table::foreign) {
      ci.ids[lp - 1] = number;
      ++covered;
    }
    // The table is not probed again: its local_plus1 now holds the kept
    // number + 1 (0: OOV) for the others' entries below.
    sl[i].local_plus1 = static_cast<uint32_t>(number + 1);
  }
  // The kept values in byte order (= numeric order); the empty string sorts
  // before them.
  const bool empty_kept = empty_seen && empty_total >= min_count;
  sort_by_value(kept);
  int32_t next = 0, empty_id = -1;
  if (empty_kept) {
    empty_id = next++;
    keep(std::string_view("", 0), empty_total);  // a non-null pointer: add() memcpys it
  }
  big_vector<int32_t> id_of(kept.size());  // number -> id
  char buf[8];
  for (uint64_t e : kept) {
    const uint32_t number = static_cast<uint32_t>(e);
    id_of[number] = next++;
    hex8_chars(static_cast<uint32_t>(e >> 32), buf);
    keep(std::string_view(buf, 8), kept_count[number]);
  }
  st.kept = static_cast<uint64_t>(next);
  // This shard's ids: entry = local id.
  for (int32_t& id : ci.ids)
    if (id >= 0) id = id_of[static_cast<std::size_t>(id)];
  if (t.empty_local != no_local) {
    ci.ids[t.empty_local] = empty_id;
    ++covered;
  }
  HF_RETURN_IF_ERROR(settle_own_ids(ci, locals, covered, next, col));
  other_ids.assign(others.size(), {});
  for (std::size_t k = 0; k < others.size(); ++k) {
    auto& ids = other_ids[k];
    ids.reserve(others[k]->entries());
    if (others[k]->has_empty) ids.push_back(empty_id);
    for (uint32_t w : where[k]) {
      const uint32_t number_plus1 = sl[w].local_plus1;
      ids.push_back(number_plus1 == 0 ? -1 : id_of[number_plus1 - 1]);
    }
  }
  t.clear_and_release();
  return st;
}

namespace {

// A growable array of trivially copyable T that leaves what it allocates
// uninitialised (pass 2's chunks of staged records are read in, then
// written out). On 2 MiB pages from 256 KiB (huge_buffer): each 4 KiB first
// touch costs ~7 us on the PVM guest (huge_memory.hpp).
template <class T>
class raw_array {
public:
  static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 16);
  T* data() const noexcept { return reinterpret_cast<T*>(buf_.data()); }
  void reserve(std::size_t n) { buf_.reserve(n * sizeof(T)); }

private:
  huge_buffer buf_;
};

// Table lookups of a column run this many rows ahead of their prefetches.
constexpr std::size_t prefetch_ahead = 40;

struct count_block_result {
  uint64_t lines = 0;
  uint64_t good = 0;
  std::vector<hit> hits;
  // In bytes.tail(count_tail_bytes(stride)): the good rows' records, then
  // column c's row keys (row_keys), then its local ids, at [c * stride, c *
  // stride + good). One range with the bytes: three ranges of their own
  // took three 2 MiB pages or more a block where one range takes two, and
  // on the PVM guest each fresh 2 MiB costs ~2 ms of zeroing and host
  // faults (2026-12-07: a fresh 64 MiB 65-79 ms, freed and taken again 3
  // ms; the kernel gives back what a process frees within a second or so).
  criteo_record* records = nullptr;
  uint64_t* keys = nullptr;
  std::size_t stride = 0;
  std::array<std::vector<std::string_view>, sparse_columns> others;  // views into `bytes`
  block_bytes bytes;
  status read;     // of `bytes`
  status written;  // staging: the pwrite of `records`
};

// Closes `fd` (the finished `tmp`) and puts `tmp` in the place of `dest`;
// on any failure `tmp` is removed. A previous run's `dest` is unlinked first: a rename over an existing file makes ext4 (auto_da_alloc)
// start writing the new file back at once, inside the rename, which took
// 10-70 ms per 160 MB part on the 2-core VM; a plain rename leaves the
// write-back to the kernel, as for any new file. (A crash in between leaves
// neither file; the job's output is incomplete then anyway.)
status finish_file(int fd, const std::string& tmp, const std::string& dest) {
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot write " + tmp + ": " + std::strerror(e));
  }
  if (::unlink(dest.c_str()) != 0 && errno != ENOENT) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot replace " + dest + ": " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), dest.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(errc::io_error, "cannot rename " + tmp + " to " + dest + ": " + std::strerror(e));
  }
  return {};
}

status write_at(int fd, const void* data, std::size_t n, uint64_t off, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io_error, "cannot write " + path + ": " + std::strerror(errno));
    }
    p += w;
    off += static_cast<uint64_t>(w);
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

status read_at(int fd, void* data, std::size_t n, uint64_t off, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return make_error(errc::io_error, "cannot read " + path + (r < 0 ? std::string(": ") + std::strerror(errno) : " (truncated)"));
    p += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<std::size_t>(r);
  }
  return {};
}

// Label and dense fields of a parsed line.
inline void fill_dense(const parsed_line& pl, criteo_record& rec, const dense_table& lut) noexcept {
  rec.label = pl.label;
  for (int j = 0; j < dense_columns; ++j) rec.dense[j] = dense_value(pl.dense[j], lut);
}

}  // namespace

namespace {

// Appends the next range's blocks (and pieces) for count_pass; false when
// there is none left.
using more_blocks = std::function<expected<bool>(std::vector<block>&, std::vector<piece_info>&)>;

status open_staged_part(shard_counts::impl& im, std::string path, std::string tmp, uint64_t key) {
  shard_counts::impl::staged_part p;
  p.path = std::move(path);
  p.tmp = std::move(tmp);
  p.key = p.next_begin = key;
  p.fd = ::open(p.tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (p.fd < 0) return make_error(errc::io_error, "cannot create " + p.tmp + ": " + std::strerror(errno));
  im.parts.push_back(std::move(p));
  im.staging = true;
  return {};
}

// Pass 1 over `blocks` and whatever more() appends (see count_shard).
expected<shard_counts> count_pass(const preprocess_options& opt, shard_counts out,
                                  std::vector<block> blocks, std::vector<piece_info> pieces,
                                  const more_blocks& more, clock_type::time_point t0) {
  auto& im = *out.impl_;
  im.spill_dir = opt.spill_dir;
  const bool staging = im.staging;
  uint64_t known_bytes = 0;  // of the blocks so far (progress)
  for (auto& b : blocks) known_bytes += b.end - b.begin;
  bool exhausted = !more;
  auto fetch = [&](std::size_t want) -> status {
    // Ranges until `want` blocks are there, or none is left (a range may
    // hold no line start).
    while (!exhausted && blocks.size() < want) {
      const std::size_t had = blocks.size();
      auto got = more(blocks, pieces);
      if (!got) return got.error();
      if (!*got) exhausted = true;
      for (std::size_t i = had; i < blocks.size(); ++i) known_bytes += blocks[i].end - blocks[i].begin;
    }
    return {};
  };
  uint64_t cap = opt.memory_cap;
  if (cap == 0) cap = std::max<uint64_t>(uint64_t{64} << 20, probe_resources().free_memory() / 2);
  out.memory_cap = cap;
  // blocks_per_worker blocks per worker in each of two segments at once
  // (one counted while the next is parsed), each block with its buffers.
  parallelism_governor gov(opt.parallelism, count_block_memory(opt) * blocks_per_worker * 2);
  malformed_sink sink(pieces, opt);
  const dense_table& lut = dense_lut();
  std::vector<uint64_t> offsets;
  uint64_t done_bytes = 0;
  // Pass 1 in segments of dop * blocks_per_worker blocks: the blocks parsed
  // in parallel, then one task per column counts the segment's rows, and
  // the records are staged. The next segment is parsed while this one is
  // counted (parallel_invoke): the column tasks are as uneven as the
  // columns (a few hold most distinct strings), and a thread done with its
  // columns parses instead of waiting for the biggest one. Two segments'
  // buffers at once (the governor counts both).
  // The most rows a MiB of input has held so far (0: no block yet). A
  // block's row keys are column-major at a stride of the rows it may hold:
  // room for every row it could (40-byte lines) touched all of the keys'
  // 5.4 MB of 2 MiB pages for a 1 MiB block of ~4k rows. The blocks parsed
  // before any was counted count their lines first (a pass over bytes in
  // the cache: an exact bound); later ones take the densest block so far
  // plus a quarter, and one that holds more rows than that is parsed again
  // with the whole room.
  std::atomic<uint64_t> densest{0};
  auto parse_segment = [&](std::vector<count_block_result>& rs, std::size_t first, std::size_t n) {
    rs.resize(n);
    tbb::parallel_for(std::size_t{0}, n, [&](std::size_t i) {
      auto& r = rs[i];
      const block& b = blocks[first + i];
      // Nothing of the block before in these buffers may be counted if the
      // read fails (the loop stops at the failed read only after counting).
      auto reset = [&r] {
        r.lines = r.good = 0;
        r.hits.clear();
        for (auto& v : r.others) v.clear();
      };
      reset();
      const std::size_t room = b.max_rows();
      const uint64_t per_mib = densest.load(std::memory_order_relaxed);
      const uint64_t bytes = b.end - b.begin;
      std::size_t stride =
          per_mib == 0 ? std::min<std::size_t>(room, static_cast<std::size_t>(bytes / 128 + 64))  // a guess, for the hint
                       : std::min<std::size_t>(room, static_cast<std::size_t>(bytes * per_mib / (1u << 20) * 5 / 4 + 64));
      r.read = r.bytes.load(b, opt.max_field_bytes, count_tail_bytes(stride));
      if (!r.read.ok()) return;
      if (per_mib == 0)
        stride = std::min<std::size_t>(
            room, static_cast<std::size_t>(std::count(r.bytes.data(), r.bytes.data() + r.bytes.size(), '\n')) + 1);
      for (;;) {
        char* tail = r.bytes.tail(count_tail_bytes(stride));
        r.records = reinterpret_cast<criteo_record*>(tail);
        r.keys = reinterpret_cast<uint64_t*>(tail + records_room(stride));
        r.stride = stride;
        criteo_record* recs = r.records;
        uint64_t* keys = r.keys;
        bool over = false;
        parsed_line pl;
        auto bad = [&](std::string_view line, uint64_t idx, const parse_error& e) {
          r.hits.push_back(make_hit(line, idx, e, r.hits.size(), opt));
        };
        r.lines = parse_block(r.bytes, opt.max_field_bytes, pl, [&](const parsed_line& pl) {
          const std::size_t row = r.good++;
          if (row >= stride) {
            over = true;
            return;
          }
          fill_dense(pl, recs[row], lut);
          row_keys(pl, keys + row, stride, r.others);
        }, bad);
        if (!over) break;
        stride = room;  // more rows than the blocks before: again, with room for every row it could hold
        reset();
      }
      if (bytes > 0) {
        const uint64_t mine = (uint64_t(r.good) << 20) / bytes + 1;
        uint64_t seen = densest.load(std::memory_order_relaxed);
        while (mine > seen && !densest.compare_exchange_weak(seen, mine, std::memory_order_relaxed)) {
        }
      }
    });
  };
  auto count_segment = [&](std::vector<count_block_result>& rs, std::size_t first) {
    // One task per column: count, and put the local id in place of the
    // key (the records get them below, row by row: stores at a 160-byte
    // stride would miss the cache 26 times per row).
    tbb::parallel_for(0, sparse_columns, [&](int c) {
      column_table& t = im.tables[c];
      uint32_t next_local = im.next_local[c];
      for (std::size_t i = 0; i < rs.size(); ++i) {
        const count_block_result& r = rs[i];
        uint64_t* __restrict keys = r.keys + c * r.stride;  // aliases no table member
        const auto& others = r.others[c];
        t.hex.count_run<prefetch_ahead>(keys, r.good, next_local, [&](uint64_t key, uint32_t& next) -> uint32_t {
          if (key == empty_key) {
            if (t.empty_local == no_local) t.empty_local = next++;
            ++t.empty_count;
            return t.empty_local;
          }
          std::string_view s = others[key & 0xffffffffu];
          string_count& v = t.strings[s];
          if (v.local_plus1 == 0) {
            v.local_plus1 = ++next;
            if (s.size() > small_key_max) t.strings.note_long_bytes(s.size());
          }
          ++v.count;
          return v.local_plus1 - 1;
        });
      }
      im.next_local[c] = next_local;
    });
    if (staging) {
      // Each block's records go to its part, after the part's earlier rows.
      offsets.resize(rs.size());
      for (std::size_t i = 0; i < rs.size(); ++i) {
        auto& part = im.parts[static_cast<std::size_t>(blocks[first + i].part)];
        offsets[i] = part.records;  // in records
        part.records += rs[i].good;
      }
      tbb::parallel_for(std::size_t{0}, rs.size(), [&](std::size_t i) {
        auto& r = rs[i];
        const auto& part = im.parts[static_cast<std::size_t>(blocks[first + i].part)];
        criteo_record* recs = r.records;
        const uint64_t* locals = r.keys;
        for (std::size_t row = 0; row < r.good; ++row)
          for (int c = 0; c < sparse_columns; ++c)
            recs[row].sparse[c] = static_cast<int32_t>(locals[c * r.stride + row]);
        r.written = write_at(part.fd, recs, r.good * sizeof(criteo_record), offsets[i] * sizeof(criteo_record),
                             part.tmp);
      });
    }
  };
  std::vector<count_block_result> res, ahead;
  std::size_t next = 0;
  int dop = gov.update();
  if (auto s = fetch(static_cast<std::size_t>(dop * blocks_per_worker)); !s.ok()) return s;
  std::size_t seg = std::min(blocks.size(), static_cast<std::size_t>(dop * blocks_per_worker));
  {
    tbb::task_arena arena(dop);
    arena.execute([&] { parse_segment(res, 0, seg); });
  }
  while (seg > 0) {
    if (opt.stop && opt.stop->load()) return stopped();
    dop = gov.update();
    const std::size_t after = next + seg;
    // The next range is asked for before this segment counts (a round trip
    // it waits for), so that with two or more threads its first blocks are
    // parsed while this segment counts.
    if (auto s = fetch(after + static_cast<std::size_t>(dop * blocks_per_worker)); !s.ok()) return s;
    const std::size_t seg_ahead = std::min(blocks.size() - after, static_cast<std::size_t>(dop * blocks_per_worker));
    tbb::task_arena arena(dop);
    // On one thread there is nothing to overlap: the next segment is parsed
    // into this one's buffers once it is counted (two sets of buffers were
    // 40 MB more fresh memory a node).
    const bool overlap = dop > 1;
    arena.execute([&] {
      if (!overlap) return count_segment(res, next);
      tbb::parallel_invoke([&] { count_segment(res, next); },
                           [&] {
                             if (seg_ahead > 0) parse_segment(ahead, after, seg_ahead);
                           });
    });
    uint64_t seg_good = 0;
    for (std::size_t i = 0; i < seg; ++i) {
      const block& b = blocks[next + i];
      seg_good += res[i].good;
      if (!res[i].read.ok()) return res[i].read;
      if (!res[i].written.ok()) return res[i].written;
      if (auto s = sink.take(b, res[i].lines, res[i].hits); !s.ok()) return s;
      out.rows += res[i].good;
      im.staged.lines += res[i].lines;
      done_bytes += b.end - b.begin;
      if (staging) im.parts[static_cast<std::size_t>(b.part)].bytes += b.end - b.begin;
    }
    next = after;
    if (overlap) std::swap(res, ahead);
    else if (seg_ahead > 0) arena.execute([&] { parse_segment(res, after, seg_ahead); });
    seg = seg_ahead;
    for (int c = 0; c < sparse_columns; ++c)
      if (im.next_local[c] > (uint32_t{1} << 31))
        return make_error(errc::out_of_memory,
                          "column C" + std::to_string(c + 1) +
                              " has more than 2^31 distinct strings in one shard; use more nodes or hash mode");
    out.peak_table_bytes = std::max<uint64_t>(out.peak_table_bytes, im.table_bytes());
    for (int c = 0; c < sparse_columns; ++c) {
      im.rows_in_table[c] += seg_good;
      if (im.rows_in_table[c] >= spill_rows) {
        if (auto s = im.spill_column(c); !s.ok()) return s;
        ++out.spills;
      }
    }
    if (auto s = im.enforce_cap(cap, out.spills); !s.ok()) return s;
    if (opt.on_progress) {
      preprocess_progress p;
      p.pass = "count";
      p.bytes_done = done_bytes;
      p.bytes_total = known_bytes;
      p.rows = out.rows;
      p.parallelism = dop;
      p.memory = current_rss();
      p.table_bytes = im.table_bytes();
      opt.on_progress(p);
    }
  }
  // Sort every column's table now, in parallel (the merge then only streams);
  // with defer_sort, only those that cannot merge by hashing (spilled, or
  // holding strings other than hex ids and the empty one).
  {
    tbb::task_arena arena(gov.update());
    arena.execute([&] {
      tbb::parallel_for(0, sparse_columns, [&](int c) {
        if (opt.defer_sort && out.hashable(c)) return;
        // A spilled column's table holds part of its counts: nothing may be dropped.
        im.sort_table(c, im.runs[c].empty() ? opt.drop_below : 0);
      });
    });
  }
  im.staged.rows = out.rows;
  im.staged.bytes = done_bytes;
  im.staged.malformed = std::move(sink.report);
  im.dop = dop;
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace

expected<shard_counts> count_shard(const input_set& in, const shard_plan& shard,
                                   const preprocess_options& opt, const std::string& staged_path) {
  auto t0 = clock_type::now();
  shard_counts out;
  auto& im = *out.impl_;
  if (!staged_path.empty()) {
    if (auto s = open_staged_part(im, staged_path, staged_path + ".tmp", 0); !s.ok()) return s;
    // A previous run's part goes now, on a thread of its own at the lowest
    // nice level, instead of inside finish_shard: freeing its page cache and
    // blocks took 15 ms for a 160 MB part on the 2-core VM, serial at the end
    // of the job; here it fills idle moments of pass 1 and the merge. This
    // shard rewrites that part anyway (finish_file still removes whatever is
    // there before the rename; a failed run leaves no part for the shard).
    // Nice 19, not SCHED_IDLE: freeing a file's blocks holds filesystem
    // journal handles, and a thread that only runs when a core is idle could
    // hold them while pass 1, keeping every core busy, waits on the journal.
    im.remove_previous = std::thread([path = staged_path] {
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
      ::unlink(path.c_str());
    });
  }
  std::vector<piece_info> pieces;
  auto blocks = cut_blocks(in, shard, pieces, opt.block_bytes);
  return count_pass(opt, std::move(out), std::move(blocks), std::move(pieces), {}, t0);
}

expected<shard_counts> count_ranges(const input_set& in, const preprocess_options& opt,
                                    const std::string& staged_prefix, const next_range& next) {
  auto t0 = clock_type::now();
  shard_counts out;
  auto& im = *out.impl_;
  im.staging = true;
  const std::vector<uint64_t> sizes = in.sizes();
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  int seq = 0;
  auto more = [&](std::vector<block>& blocks, std::vector<piece_info>& pieces) -> expected<bool> {
    auto r = next();
    if (!r) return r.error();
    if (r->empty()) return false;
    if (r->end > total) return make_error(errc::invalid_argument, "a range past the inputs' end");
    // A range that continues a part joins it; any other starts one.
    int part = -1;
    for (std::size_t k = 0; k < im.parts.size(); ++k)
      if (im.parts[k].next_begin == r->begin) part = static_cast<int>(k);
    if (part < 0) {
      if (auto s = open_staged_part(im, "", staged_prefix + "-" + std::to_string(seq++) + ".tmp", r->begin); !s.ok())
        return s;
      part = static_cast<int>(im.parts.size()) - 1;
    }
    im.parts[static_cast<std::size_t>(part)].next_begin = r->end;
    // cut_blocks numbers a plan's pieces from 0: shift them past the pieces
    // already there.
    const int piece_base = static_cast<int>(pieces.size());
    auto more_blocks = cut_blocks(in, plan_range(sizes, r->begin, r->end), pieces, opt.block_bytes);
    for (auto& b : more_blocks) {
      b.piece += piece_base;
      b.part = part;
      blocks.push_back(b);
    }
    return true;
  };
  return count_pass(opt, std::move(out), {}, {}, more, t0);
}

expected<shard_result> finish_shard(shard_counts& counts, const preprocess_options& opt) {
  auto t0 = clock_type::now();
  auto& im = *counts.impl_;
  if (!im.staging || im.finished)
    return make_error(errc::invalid_argument, "finish_shard needs a staged count_shard, once");
  for (const auto& p : im.parts)
    if (p.path.empty() && p.records > 0)
      return make_error(errc::internal, "a staged part of " + std::to_string(p.records) + " records has no name");
  // Local id -> id, per column (in place of the owner arrays).
  std::array<const int32_t*, sparse_columns> map{};
  std::array<big_vector<int32_t>, sparse_columns> maps;
  for (int c = 0; c < sparse_columns; ++c) {
    auto& ci = im.ids[c];
    if (!ci.streamed || ci.ids.size() != ci.entries || ci.oov < 0)
      return make_error(errc::internal, "column C" + std::to_string(c + 1) + ": got " +
                                            std::to_string(ci.ids.size()) + " ids for " +
                                            std::to_string(ci.entries) + " vocabulary entries");
    big_vector<int32_t>& m = maps[c];
    m.resize(ci.owner.size());
    uint64_t dropped = 0;
    for (std::size_t l = 0; l < ci.owner.size(); ++l) {
      const uint32_t e = ci.owner[l];
      if (e == dropped_owner) {
        ++dropped;
        m[l] = ci.oov;
        continue;
      }
      int32_t id = ci.ids[e];
      if (id >= ci.oov) return make_error(errc::internal, "an id past the OOV id in column C" + std::to_string(c + 1));
      m[l] = id < 0 ? ci.oov : id;
    }
    if (dropped != ci.dropped)
      return make_error(errc::internal, "column C" + std::to_string(c + 1) + ": " + std::to_string(dropped) +
                                            " local ids without a vocabulary entry for " +
                                            std::to_string(ci.dropped) + " dropped strings");
    big_vector<uint32_t>().swap(ci.owner);
    big_vector<int32_t>().swap(ci.ids);
    map[c] = m.data();
  }
  std::array<int, sparse_columns> big{};
  int n_big = 0;
  for (int c = 0; c < sparse_columns; ++c)
    if (maps[c].size() * sizeof(int32_t) > (std::size_t{256} << 10)) big[n_big++] = c;
  // Remap the staged records chunk by chunk, in parallel, part after part:
  // each chunk is read from its part's .tmp into its worker's buffer (small
  // enough to stay in the L2 cache until it is written back) and written
  // over.
  const uint64_t nrec = im.staged.rows;
  uint64_t staged_records = 0;
  for (const auto& part : im.parts) staged_records += part.records;
  if (nrec != staged_records)
    return make_error(errc::internal, "staged " + std::to_string(staged_records) + " records for " +
                                          std::to_string(nrec) + " rows");
  // 256 KiB chunks: pass 2 of 1M rows on 2 nodes took 41 ms a node against
  // 47 ms with 1 MiB ones (dev-2c-xeon, 2026-11-29).
  constexpr uint64_t chunk_records = (std::size_t{256} << 10) / sizeof(criteo_record);
  parallelism_governor gov(opt.parallelism, 2 * chunk_records * sizeof(criteo_record));
  int dop = im.dop;
  std::vector<raw_array<criteo_record>> bufs;  // one per worker of the arena
  std::vector<status> errs;
  uint64_t records_done = 0;
  for (auto& part : im.parts) {
    const uint64_t chunks = (part.records + chunk_records - 1) / chunk_records;
    uint64_t next = 0;
    while (next < chunks) {
      if (opt.stop && opt.stop->load()) return stopped();
      dop = gov.update();
      uint64_t seg = std::min<uint64_t>(chunks - next, static_cast<uint64_t>(dop) * 8);
      if (bufs.size() < static_cast<std::size_t>(dop)) bufs.resize(static_cast<std::size_t>(dop));
      errs.assign(seg, status{});
      tbb::task_arena arena(dop);
      arena.execute([&] {
        tbb::parallel_for(uint64_t{0}, seg, [&](uint64_t k) {
          uint64_t first = (next + k) * chunk_records;
          uint64_t n = std::min(chunk_records, part.records - first);
          uint64_t off = first * sizeof(criteo_record);
          auto& mine = bufs[static_cast<std::size_t>(tbb::this_task_arena::current_thread_index())];
          mine.reserve(chunk_records);
          criteo_record* buf = mine.data();
          if (auto s = read_at(part.fd, buf, n * sizeof(criteo_record), off, part.tmp); !s.ok()) {
            errs[k] = s;
            return;
          }
          // The maps of the big columns do not fit in the cache and the local
          // ids of rare strings are random: prefetch a few rows ahead.
          // Only the maps that outgrow the L2 cache are worth a prefetch.
          constexpr uint64_t ahead = 4;
          for (uint64_t r = 0; r < n; ++r) {
            if (r + ahead < n) {
              const int32_t* q = buf[r + ahead].sparse;
              for (int j = 0; j < n_big; ++j) {
                const int c = big[j];
                __builtin_prefetch(&map[c][static_cast<uint32_t>(q[c])]);
              }
            }
            int32_t* sp = buf[r].sparse;
            for (int c = 0; c < sparse_columns; ++c) sp[c] = map[c][static_cast<uint32_t>(sp[c])];
          }
          errs[k] = write_at(part.fd, buf, n * sizeof(criteo_record), off, part.tmp);
        });
      });
      for (auto& e : errs)
        if (!e.ok()) return e;
      next += seg;
      if (opt.on_progress) {
        const uint64_t rows_done = records_done + std::min(part.records, next * chunk_records);
        preprocess_progress p;
        p.pass = "apply";
        p.bytes_done = rows_done >= nrec ? im.staged.bytes : (nrec ? im.staged.bytes * rows_done / nrec : 0);
        p.bytes_total = im.staged.bytes;
        p.rows = rows_done;
        p.parallelism = dop;
        p.memory = current_rss();
        opt.on_progress(p);
      }
    }
    records_done += part.records;
  }
  im.join_remove_previous();
  shard_result out = std::move(im.staged);
  for (auto& part : im.parts) {
    int fd = std::exchange(part.fd, -1);
    if (part.path.empty()) {  // an unnamed part of no records (a range without a line start)
      ::close(fd);
      ::unlink(part.tmp.c_str());
      part.finished = true;
      continue;
    }
    if (auto s = finish_file(fd, part.tmp, part.path); !s.ok()) return s;
    part.finished = true;
    out.parts.push_back({part.path, part.key, part.records, part.bytes});
  }
  im.finished = true;
  std::sort(out.parts.begin(), out.parts.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  out.seconds = seconds_since(t0);
  out.parallelism = dop;
  return out;
}

std::vector<uint64_t> shard_counts::part_keys() const {
  std::vector<uint64_t> k;
  if (impl_)
    for (const auto& p : impl_->parts) k.push_back(p.key);
  return k;
}

void shard_counts::set_part_path(std::size_t k, std::string path) {
  if (impl_ && k < impl_->parts.size()) impl_->parts[k].path = std::move(path);
}

// ---- pass 2 --------------------------------------------------------------------

namespace {

struct apply_block_result {
  uint64_t lines = 0;
  std::vector<hit> hits;
  block_bytes bytes;
  status read;  // of `bytes`
  std::vector<criteo_record> records;
  status written;
};

inline uint64_t fnv1a64_8(const char* p) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int k = 0; k < 8; ++k) h = (h ^ static_cast<unsigned char>(p[k])) * 0x100000001b3ull;
  return h;
}

}  // namespace

expected<shard_result> apply_shard(const input_set& in, const shard_plan& shard,
                                   const vocabulary* vocab, const std::string& out_path,
                                   const preprocess_options& opt) {
  auto t0 = clock_type::now();
  if (!vocab && opt.mode == categorical_mode::vocab)
    return make_error(errc::invalid_argument, "vocab mode needs a vocabulary");
  if (opt.mode == categorical_mode::hash && opt.hash_range == 0)
    return make_error(errc::invalid_argument, "hash range must be positive");
  shard_result out;
  std::vector<piece_info> pieces;
  auto blocks = cut_blocks(in, shard, pieces, opt.block_bytes);
  uint64_t total_bytes = 0;
  for (auto& b : blocks) total_bytes += b.end - b.begin;

  std::string tmp = out_path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(errc::io_error, "cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](status s) -> expected<shard_result> {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };

  const dense_table& lut = dense_lut();
  // A block's bytes, then its records (160 bytes a row of ~250: under its bytes).
  parallelism_governor gov(opt.parallelism,
                           (huge_bytes(opt.block_bytes + fast_parse_read_bound(opt.max_field_bytes)) + opt.block_bytes) *
                               blocks_per_worker);
  malformed_sink sink(pieces, opt);
  std::vector<apply_block_result> res;
  std::vector<uint64_t> offsets;
  uint64_t file_bytes = 0;
  const range_reducer reduce(opt.hash_range ? opt.hash_range : 1);
  std::size_t next = 0;
  int dop = gov.current();
  while (next < blocks.size()) {
    if (opt.stop && opt.stop->load()) return fail(stopped());
    dop = gov.update();
    std::size_t seg = std::min(blocks.size() - next, static_cast<std::size_t>(dop * blocks_per_worker));
    res.resize(seg);
    tbb::task_arena arena(dop);
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, seg, [&](std::size_t i) {
        auto& r = res[i];
        const block& b = blocks[next + i];
        r.hits.clear();
        r.records.clear();
        r.lines = 0;
        r.read = r.bytes.load(b, opt.max_field_bytes);
        if (!r.read.ok()) return;
        r.records.reserve((b.end - b.begin) / 200 + 16);
        parsed_line pl;
        auto bad = [&](std::string_view line, uint64_t idx, const parse_error& e) {
          r.hits.push_back(make_hit(line, idx, e, r.hits.size(), opt));
        };
        r.lines = parse_block(r.bytes, opt.max_field_bytes, pl, [&](const parsed_line& pl) {
          criteo_record& rec = r.records.emplace_back();
          rec.label = pl.label;
          for (int j = 0; j < dense_columns; ++j) rec.dense[j] = dense_value(pl.dense[j], lut);
          if (vocab) {
            // Keys first and their slots prefetched, so the 26 (mostly
            // cache-missing) lookups of a row overlap.
            small_key keys[sparse_columns];
            for (int c = 0; c < sparse_columns; ++c)
              if (pl.sparse[c].size() <= small_key_max) {
                keys[c] = make_small_key(pl.sparse[c]);
                vocab->columns[c].prefetch(keys[c]);
              }
            for (int c = 0; c < sparse_columns; ++c)
              rec.sparse[c] = pl.sparse[c].size() <= small_key_max ? vocab->columns[c].lookup(keys[c])
                                                                   : vocab->columns[c].lookup(pl.sparse[c]);
          } else {
            // = hash_id(s, range): FNV-1a with 8-byte strings (Criteo's)
            // unrolled so the 26 columns' multiply chains overlap, and the
            // modulo without a division.
            for (int c = 0; c < sparse_columns; ++c) {
              std::string_view s = pl.sparse[c];
              rec.sparse[c] = static_cast<int32_t>(reduce(s.size() == 8 ? fnv1a64_8(s.data()) : fnv1a64(s)));
            }
          }
        }, bad);
      });
      // Records at their offsets, in parallel (page-cache copies).
      offsets.resize(seg);
      for (std::size_t i = 0; i < seg; ++i) {
        offsets[i] = file_bytes;
        file_bytes += res[i].records.size() * sizeof(criteo_record);
      }
      tbb::parallel_for(std::size_t{0}, seg, [&](std::size_t i) {
        auto& recs = res[i].records;
        res[i].written = write_at(fd, recs.data(), recs.size() * sizeof(criteo_record), offsets[i], tmp);
      });
    });
    for (std::size_t i = 0; i < seg; ++i) {
      const block& b = blocks[next + i];
      if (!res[i].read.ok()) return fail(res[i].read);
      if (!res[i].written.ok()) return fail(res[i].written);
      if (auto s = sink.take(b, res[i].lines, res[i].hits); !s.ok()) return fail(s);
      auto& recs = res[i].records;
      out.rows += recs.size();
      out.lines += res[i].lines;
      out.bytes += b.end - b.begin;
    }
    next += seg;
    if (opt.on_progress) {
      preprocess_progress p;
      p.pass = "apply";
      p.bytes_done = out.bytes;
      p.bytes_total = total_bytes;
      p.rows = out.rows;
      p.parallelism = dop;
      p.memory = current_rss();
      opt.on_progress(p);
    }
  }
  if (auto s = finish_file(fd, tmp, out_path); !s.ok()) return s;
  out.malformed = std::move(sink.report);
  out.seconds = seconds_since(t0);
  out.parallelism = dop;
  return out;
}

// ---- vocabulary files ------------------------------------------------------------

expected<vocab_file_writer> vocab_file_writer::open(const std::string& dir, int column) {
  vocab_file_writer w;
  w.path_ = dir + "/" + vocab_file_name(column);
  w.f_ = std::fopen((w.path_ + ".tmp").c_str(), "wb");
  if (!w.f_) return make_error(errc::io_error, "cannot create " + w.path_ + ".tmp: " + std::strerror(errno));
  std::setvbuf(w.f_, nullptr, _IONBF, 0);  // buffered here (buf_)
  return w;
}

vocab_file_writer::vocab_file_writer(vocab_file_writer&& o) noexcept
    : f_(std::exchange(o.f_, nullptr)), path_(std::move(o.path_)), buf_(std::move(o.buf_)), failed_(o.failed_) {}

vocab_file_writer::~vocab_file_writer() {
  if (f_) {
    std::fclose(f_);
    std::remove((path_ + ".tmp").c_str());
  }
}

void vocab_file_writer::flush() {
  if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) failed_ = true;
  buf_.clear();
}

void vocab_file_writer::add(std::string_view s, uint64_t count) {
  // "%s\t%llu\n", formatted by hand straight into the buffer (the merge
  // writes ~300k lines per 1M Criteo rows; a locked fwrite per line was ~5%
  // of a 2-node merge).
  constexpr std::size_t flush_at = std::size_t{1} << 20;
  if (buf_.capacity() < flush_at + 64) buf_.reserve(flush_at + 64);
  const std::size_t at = buf_.size();
  buf_.resize(at + s.size() + 22);  // string, tab, <= 20 digits, newline
  char* p = buf_.data() + at;
  std::memcpy(p, s.data(), s.size());
  p += s.size();
  *p++ = '\t';
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + count % 10);
    count /= 10;
  } while (count);
  while (n) *p++ = digits[--n];
  *p++ = '\n';
  buf_.resize(static_cast<std::size_t>(p - buf_.data()));
  if (buf_.size() >= flush_at) flush();
}

status vocab_file_writer::close() {
  flush();
  bool ok = std::fclose(std::exchange(f_, nullptr)) == 0 && !failed_;
  if (!ok || std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    std::remove((path_ + ".tmp").c_str());
    return make_error(errc::io_error, "cannot write " + path_ + " (disk full?)");
  }
  return {};
}

// ---- the local driver ------------------------------------------------------------

expected<local_result> preprocess_local(const std::vector<std::string>& inputs,
                                        const std::string& output_dir, int shards,
                                        const preprocess_options& opt_in) {
  auto t0 = clock_type::now();
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) return make_error(errc::io_error, "cannot create " + output_dir + ": " + ec.message());
  auto in = input_set::open(inputs);
  if (!in) return in.error();
  auto plan = plan_shards(in->sizes(), shards);
  local_result out;
  out.parts = static_cast<int>(plan.size());
  if (opt_in.mode == categorical_mode::vocab) {
    std::vector<shard_counts> counts;
    // balance = "steal": every claim made up front, in a seeded random
    // order of the shards, then each shard counts its own ranges.
    const bool steal = opt_in.steal_unit > 0 && plan.size() > 1;
    std::vector<std::vector<byte_range>> claimed(plan.size());
    if (steal) {
      uint64_t total = 0;
      for (uint64_t z : in->sizes()) total += z;
      range_claims rc(total, std::vector<uint64_t>(plan.size(), 1), opt_in.steal_unit);
      std::mt19937_64 rng(opt_in.steal_seed);
      std::vector<double> w;
      for (std::size_t i = 0; i < plan.size(); ++i) w.push_back(double(i + 1));
      std::vector<bool> done(plan.size(), false);
      for (std::size_t left = plan.size(); left > 0;) {
        std::discrete_distribution<std::size_t> pick(w.begin(), w.end());
        const std::size_t k = pick(rng);
        const byte_range r = rc.claim(static_cast<int>(k));
        if (!r.empty()) {
          claimed[k].push_back(r);
          continue;
        }
        if (!done[k]) done[k] = true, --left;
        w[k] = 0;
        if (left == 0) break;
      }
    }
    for (std::size_t i = 0; i < plan.size(); ++i) {
      preprocess_options opt = opt_in;
      if (plan.size() == 1) opt.drop_below = opt_in.min_count;  // nothing to add to its counts
      else opt.defer_sort = opt_in.hash_merge;
      if (opt.spill_dir.empty()) opt.spill_dir = output_dir + "/.spill";
      opt.spill_dir += "/shard-" + std::to_string(i);
      expected<shard_counts> c = make_error(errc::internal, "not counted");
      if (steal) {
        std::size_t k = 0;
        c = count_ranges(*in, opt, output_dir + "/.shard-" + std::to_string(i), [&]() -> expected<byte_range> {
          return k < claimed[i].size() ? claimed[i][k++] : byte_range{};
        });
      } else {
        c = count_shard(*in, plan[i], opt, output_dir + "/" + part_file_name(static_cast<int>(i)));
      }
      if (!c) return c.error();
      counts.push_back(std::move(*c));
    }
    if (steal) {
      // The parts in input order, wherever they were counted.
      std::vector<uint64_t> keys;
      for (auto& sc : counts)
        for (uint64_t k : sc.part_keys()) keys.push_back(k);
      std::sort(keys.begin(), keys.end());
      for (auto& sc : counts) {
        const auto mine = sc.part_keys();
        for (std::size_t k = 0; k < mine.size(); ++k)
          sc.set_part_path(k, output_dir + "/" +
                                  part_file_name(static_cast<int>(std::lower_bound(keys.begin(), keys.end(), mine[k]) -
                                                                  keys.begin())));
      }
      out.parts = static_cast<int>(keys.size());
    }
    std::vector<std::vector<int32_t>> ids(plan.size());
    uint64_t rows = 0;
    for (auto& sc : counts) rows += sc.rows;
    for (int c = 0; c < sparse_columns; ++c) {
      bool hashed = plan.size() > 1 && opt_in.hash_merge && rows <= hashed_merge_max_rows;
      for (auto& sc : counts) hashed = hashed && sc.hashable(c);
      uint64_t entries = 0;
      for (auto& sc : counts) entries += sc.column_size(c);
      const uint64_t min_local = candidate_min_count(opt_in.min_count, static_cast<int>(plan.size()));
      if (hashed && opt_in.threshold_merge && min_local >= 2 && entries >= opt_in.threshold_merge_from) {
        // By count threshold: each shard's candidates, then its counts of
        // the others' (asked in chunks, as over the wire).
        std::vector<hex_column> cand, hits(plan.size());
        for (auto& sc : counts) {
          auto e = sc.export_candidates(c, min_local);
          if (!e) return e.error();
          cand.push_back(std::move(*e));
        }
        std::vector<const hex_column*> cp, hp;
        for (auto& h : cand) cp.push_back(&h);
        auto u = candidate_queries(cp);
        if (!u) return u.error();
        const std::vector<hex_column>& asked = u->queries;
        for (std::size_t i = 0; i < plan.size(); ++i) {
          constexpr std::size_t per_chunk = 4096;
          for (std::size_t at = 0; at < asked[i].values(); at += per_chunk)
            if (auto s = counts[i].answer_queries(c, asked[i].pairs.data() + 2 * at,
                                                  std::min(per_chunk, asked[i].values() - at), hits[i]);
                !s.ok())
              return s;
          if (auto s = counts[i].finish_candidates(c); !s.ok()) return s;
          hp.push_back(&hits[i]);
        }
        auto w = vocab_file_writer::open(output_dir, c);
        if (!w) return w.error();
        std::vector<big_vector<int32_t>> cids;
        auto st = merge_candidates(
            cp, *u, hp, opt_in.min_count, [&](std::string_view s, uint64_t n) { w->add(s, n); }, cids);
        if (!st) return st.error();
        if (auto s = w->close(); !s.ok()) return s;
        for (std::size_t i = 0; i < plan.size(); ++i) {
          counts[i].add_column_ids(c, cids[i].data(), cids[i].size());
          counts[i].set_oov_id(c, static_cast<int32_t>(st->kept));
        }
        out.columns[c] = *st;
        continue;
      }
      if (hashed) {
        // Shard 0's table takes the others' entries.
        std::vector<hex_column> cols;
        for (std::size_t i = 1; i < plan.size(); ++i) {
          auto e = counts[i].export_column(c);
          if (!e) return e.error();
          cols.push_back(std::move(*e));
        }
        std::vector<const hex_column*> others;
        for (auto& h : cols) others.push_back(&h);
        auto w = vocab_file_writer::open(output_dir, c);
        if (!w) return w.error();
        std::vector<big_vector<int32_t>> other_ids;
        auto st = counts[0].merge_hashed(
            c, others, opt_in.min_count, [&](std::string_view s, uint64_t n) { w->add(s, n); }, other_ids);
        if (!st) return st.error();
        if (auto s = w->close(); !s.ok()) return s;
        for (std::size_t i = 1; i < plan.size(); ++i) {
          counts[i].add_column_ids(c, other_ids[i - 1].data(), other_ids[i - 1].size());
          counts[i].set_oov_id(c, static_cast<int32_t>(st->kept));
        }
        out.columns[c] = *st;
        continue;
      }
      std::vector<std::unique_ptr<count_stream>> streams;
      std::vector<count_stream*> raw;
      for (auto& sc : counts) {
        streams.push_back(sc.column_stream(c));
        raw.push_back(streams.back().get());
      }
      auto w = vocab_file_writer::open(output_dir, c);
      if (!w) return w.error();
      auto st = merge_column_ids(
          raw, opt_in.min_count, [&](std::string_view s, uint64_t n) { w->add(s, n); },
          [&](std::size_t i, int32_t id) { ids[i].push_back(id); });
      if (!st) return st.error();
      if (auto s = w->close(); !s.ok()) return s;
      for (std::size_t i = 0; i < plan.size(); ++i) {
        counts[i].add_column_ids(c, ids[i].data(), ids[i].size());
        counts[i].set_oov_id(c, static_cast<int32_t>(st->kept));
        ids[i].clear();
      }
      out.columns[c] = *st;
    }
    for (auto& sc : counts) {
      auto r = finish_shard(sc, opt_in);
      if (!r) return r.error();
      out.rows += r->rows;
      out.malformed.merge(r->malformed, opt_in.max_examples);
    }
    counts.clear();  // removes the run files
    std::string spill_root = opt_in.spill_dir.empty() ? output_dir + "/.spill" : opt_in.spill_dir;
    for (std::size_t i = 0; i < plan.size(); ++i) fs::remove(spill_root + "/shard-" + std::to_string(i), ec);
    if (opt_in.spill_dir.empty()) fs::remove(spill_root, ec);
  } else {
    for (std::size_t i = 0; i < plan.size(); ++i) {
      auto r = apply_shard(*in, plan[i], nullptr, output_dir + "/" + part_file_name(static_cast<int>(i)), opt_in);
      if (!r) return r.error();
      out.rows += r->rows;
      out.malformed.merge(r->malformed, opt_in.max_examples);
    }
  }
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace hetflow::kernels::preprocess
