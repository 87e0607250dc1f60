// Load time of a preprocess output for dlrm training (kernels/criteo_dataset):
//   criteo_load_bench DIR [max_rows]
// prints the wall time of load_criteo (best of 3, page cache warm after the
// first) and of criteo_table_rows (vocabularies, or the hash-mode scan).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "kernels/criteo_dataset.hpp"

using namespace hetflow::kernels;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: criteo_load_bench DIR [max_rows]\n");
    return 2;
  }
  const int64_t max_rows = argc > 2 ? std::atoll(argv[2]) : 0;
  using clk = std::chrono::steady_clock;
  double best = 1e30;
  int64_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = clk::now();
    auto r = load_criteo(argv[1], max_rows);
    double s = std::chrono::duration<double>(clk::now() - t0).count();
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().to_string().c_str());
      return 1;
    }
    rows = r->data.size();
    best = std::min(best, s);
  }
  auto t0 = clk::now();
  auto t = criteo_table_rows(argv[1]);
  double ts = std::chrono::duration<double>(clk::now() - t0).count();
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().to_string().c_str());
    return 1;
  }
  std::printf("load_criteo: %lld rows in %.3f s (%.1f M rows/s, %.0f MB/s of records)\n", (long long)rows, best,
              double(rows) / best / 1e6, double(rows) * 160.0 / best / 1e6);
  std::printf("criteo_table_rows (%s): %.3f s\n", t->from_vocabularies ? "vocabularies" : "scan", ts);
  return 0;
}
