// The bad-file corpus: every test/topology/corpus/*.toml holds one or more
//   # expect: LINE:COL: <substring of the message>
// lines. The file's diagnostics must match them exactly: same count, and each
// expected line:col (as printed, so whole-file problems are 1:1) matched by a
// distinct diagnostic whose message contains the substring.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_catalog.hpp"
#include "topology/parser.hpp"

namespace fs = std::filesystem;
using namespace hetflow::topology;

namespace {

struct expectation {
  uint32_t line = 0;
  uint32_t column = 0;
  std::string needle;
};

std::vector<expectation> read_expectations(const fs::path& p) {
  std::vector<expectation> out;
  std::ifstream in(p, std::ios::binary);
  std::string line;
  const std::string tag = "# expect: ";
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto at = line.find(tag);
    if (at == std::string::npos) continue;
    std::istringstream ss(line.substr(at + tag.size()));
    expectation e;
    char colon1 = 0, colon2 = 0;
    ss >> e.line >> colon1 >> e.column >> colon2;
    BOOST_REQUIRE_MESSAGE(ss && colon1 == ':' && colon2 == ':',
                          p.filename().string() << ": malformed expect line: " << line);
    std::getline(ss, e.needle);
    e.needle.erase(0, e.needle.find_first_not_of(' '));
    BOOST_REQUIRE_MESSAGE(!e.needle.empty(), p.filename().string() << ": empty expectation");
    out.push_back(e);
  }
  return out;
}

std::vector<fs::path> corpus_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(HETFLOW_TOPOLOGY_CORPUS))
    if (entry.path().extension() == ".toml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(corpus)

BOOST_AUTO_TEST_CASE(corpus_is_big_enough) {
  BOOST_TEST(corpus_files().size() >= 25u);
}

BOOST_AUTO_TEST_CASE(every_bad_file_gives_exactly_its_expected_diagnostics) {
  const catalog cat = test::make_test_catalog();
  for (const fs::path& file : corpus_files()) {
    BOOST_TEST_CONTEXT("corpus file " << file.filename().string()) {
      const std::vector<expectation> expected = read_expectations(file);
      BOOST_TEST(!expected.empty(), "no '# expect:' lines (a corpus file must be bad)");
      const parse_result r = load_topology(file, cat);
      std::string got;
      for (const auto& d : r.errors) got += "  " + format(d) + "\n";
      BOOST_TEST(!r.ok());
      BOOST_TEST(r.errors.size() == expected.size(), "diagnostics:\n" << got);
      std::vector<bool> used(r.errors.size(), false);
      for (const auto& e : expected) {
        bool found = false;
        for (size_t i = 0; i < r.errors.size() && !found; ++i) {
          const diagnostic& d = r.errors[i];
          // Compare as printed: whole-file diagnostics ({0,0}) read 1:1.
          const uint32_t line = d.where.line == 0 ? 1 : d.where.line;
          const uint32_t col = d.where.line == 0 ? 1 : d.where.column;
          if (!used[i] && line == e.line && col == e.column &&
              d.message.find(e.needle) != std::string::npos) {
            used[i] = true;
            found = true;
          }
        }
        BOOST_TEST(found, "expected " << e.line << ":" << e.column << ": " << e.needle
                                      << "\ndiagnostics:\n" << got);
      }
      for (const auto& d : r.errors) {
        BOOST_TEST(d.file == file.string());
        BOOST_TEST(format(d).rfind(file.string() + ":", 0) == 0u);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
