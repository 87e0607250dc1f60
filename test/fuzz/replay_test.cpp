// Replays every file of the fuzz target's seed corpus and regression inputs
// through its LLVMFuzzerTestOneInput, in normal (gcc, uninstrumented) builds:
// a crash that a fuzzer once found stays fixed. One executable per target
// (each links one target's source); CMakeLists.txt compiles in its
// directories: test/fuzz/corpus/<target> and test/fuzz/regressions/<target>.
#define BOOST_TEST_MODULE fuzz_replay
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test/fuzz/fuzz_check.hpp"

namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(replays_every_corpus_and_regression_input) {
  std::size_t inputs = 0;
  for (const fs::path dir : {HETFLOW_FUZZ_CORPUS_DIR, HETFLOW_FUZZ_REGRESSION_DIR}) {
    if (!fs::is_directory(dir)) continue;  // e.g. no regressions yet
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      BOOST_TEST_CHECKPOINT("input " << f.string());
      // A broken contract aborts inside (FUZZ_CHECK): the test dies naming the input above.
      LLVMFuzzerTestOneInput(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
      ++inputs;
    }
  }
  BOOST_TEST_MESSAGE("replayed " << inputs << " inputs");
  BOOST_TEST(inputs > 0);  // the seed corpus is never empty: a wrong path fails here
}
