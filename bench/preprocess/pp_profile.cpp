// pp_profile: the preprocess kernels alone (no CAF, no node processes), for
// instruction counts and profiles of one pass at a time.
//
//   pp_profile FILE OUT_DIR [--mode vocab|hash] [--min-count N] [--range N]
//              [--shards N] [--threads N] [--repeat N]
//              [--block-bytes BYTES]
//   pp_profile --gen ROWS SEED FILE     (= hetflow gen-criteo, without the app)
//
// Runs preprocess_local (vocab: count_shard, merge_column_ids, finish_shard;
// hash: apply_shard) and prints rows and seconds. Under
// `valgrind --tool=callgrind --toggle-collect=...` or `perf stat` it gives the
// per-row cost of the kernels that `hetflow run` spends most of its time in.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/synthetic_criteo.hpp"

namespace pp = hetflow::kernels::preprocess;

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--gen") {
    pp::synthetic_options g;
    g.rows = std::strtoull(argv[2], nullptr, 10);
    g.seed = std::strtoull(argv[3], nullptr, 10);
    auto s = pp::write_synthetic_criteo(argv[4], g);
    if (!s.ok()) std::fprintf(stderr, "pp_profile: %s\n", s.to_string().c_str());
    return s.ok() ? 0 : 1;
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: pp_profile FILE OUT_DIR [--mode vocab|hash] [--min-count N] [--range N] "
                 "[--shards N] [--threads N] [--repeat N]\n");
    return 2;
  }
  std::vector<std::string> inputs{argv[1]};
  std::string out = argv[2];
  pp::preprocess_options opt;
  opt.min_count = 3;
  opt.hash_range = 10000000;
  opt.parallelism = 1;
  int shards = 1, repeat = 1;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") opt.mode = v == "hash" ? pp::categorical_mode::hash : pp::categorical_mode::vocab;
    else if (k == "--min-count") opt.min_count = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--range") opt.hash_range = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--shards") shards = std::atoi(v.c_str());
    else if (k == "--threads") opt.parallelism = std::atoi(v.c_str());
    else if (k == "--repeat") repeat = std::atoi(v.c_str());
    else if (k == "--block-bytes") opt.block_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto res = pp::preprocess_local(inputs, out, shards, opt);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!res) {
      std::fprintf(stderr, "pp_profile: %s\n", res.error().to_string().c_str());
      return 1;
    }
    std::printf("%s: %llu rows, %llu malformed, %.3f s, %.0f rows/s\n",
                opt.mode == pp::categorical_mode::hash ? "hash" : "vocab",
                static_cast<unsigned long long>(res->rows), static_cast<unsigned long long>(res->malformed.total), s,
                res->rows / s);
  }
  return 0;
}
