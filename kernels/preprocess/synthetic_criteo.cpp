#include "kernels/preprocess/synthetic_criteo.hpp"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/preprocess/criteo_record.hpp"

namespace hetflow::kernels::preprocess {
namespace {

// Criteo Kaggle (display advertising challenge) distinct values per column.
constexpr uint64_t cardinality[sparse_columns] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27,   14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};
constexpr double sparse_missing[sparse_columns] = {
    0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0,
    0.0, 0.0, 0.03, 0.0, 0.0, 0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44};
constexpr double dense_missing[dense_columns] = {0.45, 0.0,  0.21, 0.22, 0.03, 0.22, 0.04,
                                                 0.0,  0.04, 0.45, 0.04, 0.77, 0.22};
// log10 of the largest value per dense column.
constexpr double dense_decades[dense_columns] = {2.5, 4.0, 4.8, 2.7, 6.4, 5.0, 3.8,
                                                 3.7, 4.0, 1.0, 2.3, 2.9, 3.8};

inline uint64_t splitmix(uint64_t& s) noexcept {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline double uniform(uint64_t& s) noexcept {
  return static_cast<double>(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  int n = std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  out.append(buf, static_cast<std::size_t>(n));
}

}  // namespace

// Clicks depend on the features, so that a model trained on generated data
// has something to learn (test AUC well above 0.5): the click probability is
// sigmoid(bias + sum of per-value weights of a few categorical columns +
// a term in log(1 + I1)). A value's weight is a fixed function of (column,
// value), in [-label_weight, label_weight]; missing values weigh 0. The
// bias puts the click rate near Criteo's ~26%.
constexpr bool label_column[sparse_columns] = {true,  true,  false, false, true,  false, true,  true,  false,
                                               true,  true,  false, true,  false, false, false, false, false,
                                               false, false, false, false, false, false, false, false};
constexpr double label_weight = 0.8, label_bias = -1.35, label_i1 = 0.25;

double value_weight(int column, uint64_t rank) noexcept {
  uint64_t h = static_cast<uint64_t>(column + 101) * 0xA24BAED4963EE407ull ^ rank;
  splitmix(h);
  return label_weight * (2.0 * uniform(h) - 1.0);
}

void synthetic_criteo_line(uint64_t seed, uint64_t row, std::string& out) {
  uint64_t s = seed * 0xD1B54A32D192ED03ull ^ (row + 1) * 0x9E3779B97F4A7C15ull;
  splitmix(s);
  // The label's uniform draw comes first (the features use the same draws
  // whatever the label); the label itself is written once the features are known.
  const double label_draw = uniform(s);
  const std::size_t label_at = out.size();
  out += '0';
  double logit = label_bias;
  for (int j = 0; j < dense_columns; ++j) {
    out += '\t';
    if (uniform(s) < dense_missing[j]) continue;
    if (j == 1 && uniform(s) < 0.08) {
      append_int(out, -1 - static_cast<int64_t>(splitmix(s) % 3));
      continue;
    }
    // log-uniform in [1, 10^d], minus 1: many zeros and small values, a long tail.
    double x = std::exp(uniform(s) * dense_decades[j] * 2.302585092994046) - 1.0;
    append_int(out, static_cast<int64_t>(x));
    if (j == 0) logit += label_i1 * (std::log1p(std::floor(x)) - 1.5);
  }
  static const char hex[] = "0123456789abcdef";
  for (int c = 0; c < sparse_columns; ++c) {
    out += '\t';
    if (sparse_missing[c] > 0 && uniform(s) < sparse_missing[c]) continue;
    double u = uniform(s);
    uint64_t rank = static_cast<uint64_t>(std::exp(u * std::log(static_cast<double>(cardinality[c]) + 1.0))) - 1;
    if (label_column[c]) logit += value_weight(c, rank);
    uint64_t h = static_cast<uint64_t>(c + 1) * 0x9E3779B97F4A7C15ull ^ rank;
    splitmix(h);
    uint32_t v = static_cast<uint32_t>(splitmix(h));
    char buf[8];
    for (int k = 7; k >= 0; --k) {
      buf[k] = hex[v & 15];
      v >>= 4;
    }
    out.append(buf, 8);
  }
  out += '\n';
  if (label_draw < 1.0 / (1.0 + std::exp(-logit))) out[label_at] = '1';
}

status write_synthetic_criteo(const std::string& path, const synthetic_options& opt,
                              const std::function<void(uint64_t)>& progress) {
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return make_error(errc::io_error, "cannot create " + tmp + ": " + std::strerror(errno));
  constexpr uint64_t chunk_rows = 16384;
  int threads = opt.threads > 0 ? opt.threads : tbb::this_task_arena::max_concurrency();
  tbb::task_arena arena(threads);
  std::vector<std::string> bufs(static_cast<std::size_t>(threads) * 4);
  bool ok = true;
  for (uint64_t row = 0; row < opt.rows && ok;) {
    uint64_t group_rows = std::min<uint64_t>(opt.rows - row, chunk_rows * bufs.size());
    std::size_t chunks = static_cast<std::size_t>((group_rows + chunk_rows - 1) / chunk_rows);
    arena.execute([&] {
      tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t k) {
        auto& b = bufs[k];
        b.clear();
        uint64_t r0 = row + k * chunk_rows;
        uint64_t r1 = std::min(row + group_rows, r0 + chunk_rows);
        for (uint64_t r = r0; r < r1; ++r) synthetic_criteo_line(opt.seed, r, b);
      });
    });
    for (std::size_t k = 0; k < chunks; ++k)
      ok = ok && std::fwrite(bufs[k].data(), 1, bufs[k].size(), f) == bufs[k].size();
    row += group_rows;
    if (progress) progress(row);
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(errc::io_error, "cannot write " + path + " (disk full?)");
  }
  return {};
}

}  // namespace hetflow::kernels::preprocess
