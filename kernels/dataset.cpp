#include "kernels/dataset.hpp"

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "kernels/cpu/parallel.hpp"
#include "kernels/random.hpp"

namespace hetflow::kernels {
namespace {

// A training set is read a few random rows at a time (memory_source's
// gather): on 4 KiB pages nearly every row misses the TLB, and in a VM each
// miss walks two page tables. Asked before the set is written, the kernel
// backs its 2 MiB-aligned interior with transparent huge pages where it is
// in madvise mode (Debian's default) and has them. mlp on Fashion-MNIST, one
// thread (dev-2c-xeon, 2026-11-29): the 64-row gather's mean 147 us -> 58 us
// (median 51 -> 31), 30.9-32.5k -> 32.5-34.0k samples/s. Best effort.
void prefer_huge_pages(tensor& t) {
  constexpr uintptr_t huge = uintptr_t{2} << 20;
  const auto a = reinterpret_cast<uintptr_t>(t.bytes());
  const uintptr_t first = (a + huge - 1) & ~(huge - 1), end = (a + t.byte_size()) & ~(huge - 1);
  if (end > first) (void)::madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
}

}  // namespace


shape image_dataset::sample_shape() const {
  const shape& s = images.shape();
  return shape{s.dims().subspan(s.rank() > 0 ? 1 : 0)};
}

namespace {

struct gz_closer {
  void operator()(gzFile f) const noexcept { gzclose(f); }
};
using gz_ptr = std::unique_ptr<gzFile_s, gz_closer>;

// Whole file (gzip or raw: zlib reads both) into memory; at most max_bytes
// of it when given (the rest is not read, nor decompressed).
expected<std::vector<uint8_t>> read_maybe_gz(const std::string& dir, const std::string& stem,
                                             std::string& used_path,
                                             uint64_t max_bytes = std::numeric_limits<uint64_t>::max()) {
  namespace fs = std::filesystem;
  std::string path;
  for (const std::string& cand : {dir + "/" + stem + ".gz", dir + "/" + stem}) {
    std::error_code ec;
    if (fs::is_regular_file(cand, ec)) {
      path = cand;
      break;
    }
  }
  if (path.empty())
    return make_error(errc::not_found, "Fashion-MNIST file " + dir + "/" + stem + "[.gz] does not exist");
  used_path = path;
  gz_ptr f(gzopen(path.c_str(), "rb"));
  if (!f) return make_error(errc::io_error, path + ": cannot open");
  gzbuffer(f.get(), 1 << 20);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (out.size() < max_bytes) {
    const auto want = static_cast<unsigned>(std::min<uint64_t>(chunk.size(), max_bytes - out.size()));
    int n = gzread(f.get(), chunk.data(), want);
    if (n < 0) {
      int zerr = 0;
      const char* msg = gzerror(f.get(), &zerr);
      return make_error(errc::io_error, path + ": " + (msg ? msg : "read error"));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    if (out.size() > (uint64_t(1) << 32))
      return make_error(errc::parse_error, path + ": larger than 4 GiB, not an IDX file of this dataset");
  }
  return out;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// Parses an IDX header of unsigned bytes with `rank` dims; returns dims.
// `whole`: raw must hold exactly what the header says, else at least the
// header (a prefix of the file).
expected<std::vector<int64_t>> idx_dims(const std::vector<uint8_t>& raw, int rank, const std::string& path,
                                        bool whole = true) {
  if (raw.size() < 4 + 4 * std::size_t(rank))
    return make_error(errc::parse_error, path + ": truncated IDX header (" + std::to_string(raw.size()) + " bytes)");
  uint32_t magic = be32(raw.data());
  if (magic != (0x0800u | uint32_t(rank)))
    return make_error(errc::parse_error, path + ": IDX magic 0x" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08x", magic);
      return std::string(b);
    }() + ", expected unsigned-byte data of rank " + std::to_string(rank));
  std::vector<int64_t> dims;
  uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    dims.push_back(be32(raw.data() + 4 + 4 * i));
    total *= uint64_t(dims.back());
  }
  if (whole && raw.size() != 4 + 4 * std::size_t(rank) + total)
    return make_error(errc::parse_error, path + ": header says " + std::to_string(total) + " values but the file has " +
                                             std::to_string(raw.size() - 4 - 4 * std::size_t(rank)));
  return dims;
}

}  // namespace

expected<image_dataset> load_fashion_mnist(const std::string& dir, bool train, int64_t max_rows) {
  const std::string prefix = train ? "train" : "t10k";
  std::string img_path, lbl_path;
  // The first max_rows samples: the headers, then as many bytes as they
  // need (Fashion-MNIST's images are 28 x 28; a file with other dims is
  // read whole).
  const bool part = max_rows >= 0;
  const uint64_t img_cap = part ? 16 + uint64_t(max_rows) * 28 * 28 : std::numeric_limits<uint64_t>::max();
  const uint64_t lbl_cap = part ? 8 + uint64_t(max_rows) : std::numeric_limits<uint64_t>::max();
  HF_ASSIGN_OR_RETURN(auto img_raw, read_maybe_gz(dir, prefix + "-images-idx3-ubyte", img_path, img_cap));
  HF_ASSIGN_OR_RETURN(auto lbl_raw, read_maybe_gz(dir, prefix + "-labels-idx1-ubyte", lbl_path, lbl_cap));
  HF_ASSIGN_OR_RETURN(auto idims, idx_dims(img_raw, 3, img_path, !part));
  HF_ASSIGN_OR_RETURN(auto ldims, idx_dims(lbl_raw, 1, lbl_path, !part));
  if (idims[0] != ldims[0])
    return make_error(errc::parse_error, img_path + " has " + std::to_string(idims[0]) + " images but " + lbl_path +
                                             " has " + std::to_string(ldims[0]) + " labels");
  if (part) {
    const int64_t rows = std::min(idims[0], max_rows);
    if (idims[1] * idims[2] != 28 * 28 || img_raw.size() < 16 + uint64_t(rows * idims[1] * idims[2]) ||
        lbl_raw.size() < 8 + uint64_t(rows))
    {
      HF_ASSIGN_OR_RETURN(image_dataset all, load_fashion_mnist(dir, train, -1));
      return first_samples(all, rows);
    }
    idims[0] = ldims[0] = rows;
  }
  image_dataset d;
  d.classes = 10;
  const int64_t n = idims[0], h = idims[1], w = idims[2];
  d.images = tensor::empty({n, 1, h, w});
  prefer_huge_pages(d.images);
  const uint8_t* px = img_raw.data() + 16;
  float* out = d.images.f32();
  cpu::parallel_elements(n * h * w, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = float(px[i]) * (1.0f / 255.0f);
  });
  d.labels.resize(std::size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t y = lbl_raw[8 + std::size_t(i)];
    if (y >= 10)
      return make_error(errc::parse_error, lbl_path + ": label " + std::to_string(y) + " of sample " +
                                               std::to_string(i) + " is not in 0..9");
    d.labels[std::size_t(i)] = y;
  }
  return d;
}

image_dataset make_synthetic_images(const shape& sample, int64_t count, int64_t classes, uint64_t seed,
                                    float noise, int64_t first) {
  image_dataset d;
  d.classes = classes;
  const int64_t per = sample.numel();
  shape s{count};
  for (int64_t dim : sample.dims()) s.push_back(dim);
  d.images = tensor::empty(s);
  prefer_huge_pages(d.images);
  std::vector<float> protos(std::size_t(classes * per));
  rng proto_rng(splitmix64(seed ^ 0x9e0709e5ull));
  for (float& v : protos) v = proto_rng.normal();
  d.labels.resize(std::size_t(count));
  float* out = d.images.f32();
  int32_t* labels = d.labels.data();
  cpu::parallel_range(count, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      rng r(splitmix64(seed ^ splitmix64(uint64_t(first + i) + 1)));
      int32_t y = int32_t(r.below(uint64_t(classes)));
      labels[i] = y;
      const float* p = protos.data() + y * per;
      float* x = out + i * per;
      for (int64_t j = 0; j < per; ++j) x[j] = p[j] + noise * r.normal();
    }
  });
  return d;
}

normalization channel_stats(const image_dataset& data) {
  const shape& s = data.images.shape();
  const int64_t n = s[0], c = s[1], hw = s.numel() / std::max<int64_t>(1, n * c);
  normalization st;
  st.mean.assign(std::size_t(c), 0.0f);
  st.stddev.assign(std::size_t(c), 1.0f);
  const float* x = data.images.f32();
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0.0, sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * c + ch) * hw;
      double ls = 0.0, lq = 0.0;
      for (int64_t j = 0; j < hw; ++j) {
        ls += p[j];
        lq += double(p[j]) * p[j];
      }
      sum += ls;
      sq += lq;
    }
    double cnt = double(n * hw);
    double mean = cnt > 0 ? sum / cnt : 0.0;
    double var = cnt > 0 ? std::max(0.0, sq / cnt - mean * mean) : 1.0;
    st.mean[std::size_t(ch)] = float(mean);
    st.stddev[std::size_t(ch)] = var > 0 ? float(std::sqrt(var)) : 1.0f;
  }
  return st;
}

void normalize(image_dataset& data, const normalization& st) {
  const shape& s = data.images.shape();
  const int64_t n = s[0], c = s[1], hw = s.numel() / std::max<int64_t>(1, n * c);
  float* x = data.images.f32();
  cpu::parallel_range(n * c, std::max<int64_t>(1, cpu::serial_elements / std::max<int64_t>(hw, 1)),
                      [&](int64_t b, int64_t e) {
                        for (int64_t r = b; r < e; ++r) {
                          const float m = st.mean[std::size_t(r % c)];
                          const float inv = 1.0f / st.stddev[std::size_t(r % c)];
                          float* p = x + r * hw;
                          for (int64_t j = 0; j < hw; ++j) p[j] = (p[j] - m) * inv;
                        }
                      });
}

image_dataset first_samples(const image_dataset& d, int64_t rows) {
  rows = std::clamp<int64_t>(rows, 0, d.size());
  image_dataset out;
  out.classes = d.classes;
  shape s{rows};
  const shape one = d.sample_shape();
  for (int64_t dim : one.dims()) s.push_back(dim);
  out.images = tensor::empty(s);
  if (rows > 0) std::memcpy(out.images.f32(), d.images.f32(), std::size_t(rows * one.numel()) * sizeof(float));
  out.labels.assign(d.labels.begin(), d.labels.begin() + rows);
  return out;
}

}  // namespace hetflow::kernels
