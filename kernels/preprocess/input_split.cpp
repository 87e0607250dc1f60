#include "kernels/preprocess/input_split.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hetflow::kernels::preprocess {

expected<std::shared_ptr<const mapped_file>> mapped_file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(errc::io_error, "cannot open input " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(errc::io_error, "input " + path + " is not a regular file");
  }
  std::shared_ptr<mapped_file> m(new mapped_file());
  m->path_ = path;
  m->size_ = static_cast<uint64_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error(errc::io_error, "cannot map input " + path + ": " + std::strerror(e));
    }
    ::madvise(p, m->size_, MADV_SEQUENTIAL);
    m->data_ = static_cast<const char*>(p);
  }
  m->fd_ = fd;
  return std::shared_ptr<const mapped_file>(std::move(m));
}

mapped_file::~mapped_file() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

status mapped_file::read(uint64_t off, char* dst, std::size_t n) const {
  while (n > 0) {
    const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return make_error(errc::io_error, "cannot read input " + path_ +
                                            (r < 0 ? std::string(": ") + std::strerror(errno)
                                                   : std::string(" (it got shorter while the job ran)")));
    dst += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<std::size_t>(r);
  }
  return {};
}

void mapped_file::drop_pages(uint64_t begin, uint64_t end) const noexcept {
  if (!data_) return;
  long page = ::sysconf(_SC_PAGESIZE);
  uint64_t b = (begin + page - 1) / page * page;
  uint64_t e = std::min(end, size_) / page * page;
  if (e > b) ::madvise(const_cast<char*>(data_) + b, e - b, MADV_DONTNEED);
}

uint64_t align_to_line(const char* data, uint64_t size, uint64_t pos) noexcept {
  if (pos == 0) return 0;
  if (pos >= size) return size;
  if (data[pos - 1] == '\n') return pos;
  const void* nl = std::memchr(data + pos, '\n', size - pos);
  return nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - data) + 1 : size;
}

uint64_t count_lines_before(const char* data, uint64_t pos) noexcept {
  // std::count vectorises at -O3: several GB/s; used only to name lines in
  // malformed-input reports.
  return static_cast<uint64_t>(std::count(data, data + pos, '\n'));
}

uint64_t shard_plan::bytes() const noexcept {
  uint64_t b = 0;
  for (auto& p : pieces) b += p.end - p.begin;
  return b;
}

std::vector<shard_plan> plan_shards(const std::vector<uint64_t>& file_sizes, int shards) {
  return plan_shards(file_sizes, std::vector<uint64_t>(static_cast<std::size_t>(std::max(1, shards)), 1));
}

namespace {

// Where the shares of `total` bytes cut, in proportion to the weights (a
// weight of 0 counts as 1; none: one share): weights.size() + 1 offsets
// from 0 to total.
std::vector<uint64_t> share_cuts(uint64_t total, const std::vector<uint64_t>& weights) {
  std::vector<uint64_t> w = weights;
  if (w.empty()) w.push_back(1);
  unsigned __int128 sum = 0;
  for (auto& x : w) sum += x = std::max<uint64_t>(x, 1);
  std::vector<uint64_t> cuts{0};
  unsigned __int128 before = 0;  // the weights of the shares before
  for (uint64_t x : w) {
    // 128-bit: total * weight sums overflow 64 bits on huge inputs. With
    // equal weights this is i * total / shards, as it always was.
    before += x;
    cuts.push_back(static_cast<uint64_t>(static_cast<unsigned __int128>(total) * before / sum));
  }
  return cuts;
}

}  // namespace

std::vector<shard_plan> plan_shards(const std::vector<uint64_t>& file_sizes, const std::vector<uint64_t>& weights) {
  uint64_t total = 0;
  for (auto s : file_sizes) total += s;
  const std::vector<uint64_t> cuts = share_cuts(total, weights);
  std::vector<shard_plan> plan;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) plan.push_back(plan_range(file_sizes, cuts[i], cuts[i + 1]));
  return plan;
}

shard_plan plan_range(const std::vector<uint64_t>& file_sizes, uint64_t begin, uint64_t end) {
  shard_plan plan;
  uint64_t off = 0;
  for (std::size_t f = 0; f < file_sizes.size(); ++f) {
    const uint64_t fb = off, fe = off + file_sizes[f];
    off = fe;
    const uint64_t b = std::max(begin, fb), e = std::min(end, fe);
    if (b < e) plan.pieces.push_back({static_cast<int>(f), b - fb, e - fb});
  }
  return plan;
}

uint64_t default_claim_unit(uint64_t total, int shards) {
  const uint64_t share = total / static_cast<uint64_t>(std::max(1, shards)) / 64;
  return std::clamp<uint64_t>(share, uint64_t{1} << 20, uint64_t{64} << 20);
}

range_claims::range_claims(uint64_t total, const std::vector<uint64_t>& weights, uint64_t min_unit)
    : total_(total), min_unit_(std::max<uint64_t>(1, min_unit)) {
  const std::size_t n = std::max<std::size_t>(1, weights.size());
  back_.assign(n, 0);
  front_.assign(n, 0);
  claims_.assign(n, 0);
  frozen_.assign(n, false);
  // The middle of each share (plan_shards' cuts), the first shard at 0 and
  // the last at the end.
  const std::vector<uint64_t> cuts = share_cuts(total, weights);
  for (std::size_t i = 0; i < n; ++i)
    back_[i] = front_[i] = i == 0 ? 0 : i + 1 == n ? total : cuts[i] + (cuts[i + 1] - cuts[i]) / 2;
}

byte_range range_claims::claim(int shard) {
  if (shard < 0 || shard >= shards() || frozen_[std::size_t(shard)]) return {};
  const auto i = static_cast<std::size_t>(shard);
  const std::size_t n = back_.size();
  // The gaps: [left_end, back) and [front, right_end).
  const uint64_t left_end = i == 0 ? 0 : front_[i - 1];
  const uint64_t right_end = i + 1 == n ? total_ : back_[i + 1];
  const uint64_t left = back_[i] > left_end ? back_[i] - left_end : 0;
  const uint64_t right = right_end > front_[i] ? right_end - front_[i] : 0;
  if (left == 0 && right == 0) return {};
  const bool forward = right >= left;
  const uint64_t gap = forward ? right : left;
  // Alone on that gap (the neighbour lost, or none: a one-shard job): all
  // of it; else a quarter, at least min_unit, and not leaving a sliver.
  const bool alone = forward ? (i + 1 == n || frozen_[i + 1]) : (i == 0 || frozen_[i - 1]);
  uint64_t unit = alone ? gap : std::max(min_unit_, gap / 4);
  if (unit >= gap || gap - unit < min_unit_) unit = gap;
  ++claims_[i];
  if (forward) {
    byte_range r{front_[i], front_[i] + unit};
    front_[i] = r.end;
    return r;
  }
  byte_range r{back_[i] - unit, back_[i]};
  back_[i] = r.begin;
  return r;
}

void range_claims::freeze(int shard) {
  if (shard < 0 || shard >= shards()) return;
  const auto i = static_cast<std::size_t>(shard);
  frozen_[i] = true;
  // A gap between two frozen shards has no one left to claim it: the one
  // frozen last takes it into its slice (its taker counts it).
  if (i + 1 < back_.size() && frozen_[i + 1] && back_[i + 1] > front_[i]) front_[i] = back_[i + 1];
  if (i > 0 && frozen_[i - 1] && front_[i - 1] < back_[i]) back_[i] = front_[i - 1];
}
byte_range range_claims::slice(int shard) const {
  if (shard < 0 || shard >= shards()) return {};
  return {back_[std::size_t(shard)], front_[std::size_t(shard)]};
}
uint64_t range_claims::claims(int shard) const {
  return shard >= 0 && shard < shards() ? claims_[std::size_t(shard)] : 0;
}

}  // namespace hetflow::kernels::preprocess
