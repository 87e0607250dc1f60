// synthetic_criteo: deterministic Criteo-format text for tests and benchmarks.
//
// Row r depends only on (seed, r) (a splitmix64 stream per row), so the output
// is the same for the same --rows/--seed whatever the thread count. Shape:
//   label      1 with probability sigmoid(bias + weights of the values of
//              C1, C2, C5, C7, C8, C10, C11, C13 + a term in log(1 + I1)):
//              learnable (a model can beat AUC 0.5 by far), ~25% clicks
//   I1..I13    missing with per-column probability (5%..45%); heavy-tailed
//              counts (log-uniform up to 10^k); I2 is negative (-1..-3) in 8%
//              of rows, like the real data
//   C1..C26    missing with per-column probability (0%..45%); value rank drawn
//              Zipf-like (P(rank <= k) ~ log(k+1) / log(cardinality)) with the
//              Criteo Kaggle cardinalities (up to ~10^7: high-cardinality
//              columns); the string is 8 lowercase hex digits of a hash of
//              (column, rank)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "schemas/error.hpp"

namespace hetflow::kernels::preprocess {

struct synthetic_options {
  uint64_t rows = 1000;
  uint64_t seed = 1;
  int threads = 0;  // 0 = all cores
};

// Appends row r's line (with '\n') to out.
void synthetic_criteo_line(uint64_t seed, uint64_t row, std::string& out);

// Writes rows lines to path (through path + ".tmp", renamed when complete).
// `progress(rows_done)` is called from the writing thread now and then.
status write_synthetic_criteo(const std::string& path, const synthetic_options& opt,
                              const std::function<void(uint64_t)>& progress = {});

}  // namespace hetflow::kernels::preprocess
