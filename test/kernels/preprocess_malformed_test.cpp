// kernels/preprocess: a corpus of malformed inputs, each with its expected
// report (kinds, counts, file:line of every example) under policy skip, the
// error under policy fail, and the good lines around them still converted.
#define BOOST_TEST_MODULE preprocess_malformed
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test/scratch_dir.hpp"
#include "kernels/preprocess/line_parser.hpp"
#include "kernels/preprocess/preprocess.hpp"

namespace fs = std::filesystem;
namespace pp = hetflow::kernels::preprocess;

namespace {

const fs::path& scratch_root() { return hetflow::test::scratch_root("hetflow-ppm-test"); }

fs::path scratch(const std::string& name) {
  fs::path p = scratch_root() / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A good line with the given fields replaced (0-based field index -> text).
std::string line_with(std::vector<std::pair<int, std::string>> edits = {}) {
  std::vector<std::string> f(40);
  f[0] = "1";
  for (int j = 1; j <= 13; ++j) f[j] = std::to_string(j * 3 - 5);
  for (int c = 0; c < 26; ++c) f[14 + c] = "68fd1e64";
  for (auto& [i, t] : edits) f[i] = t;
  std::string l;
  for (int i = 0; i < 40; ++i) l += (i ? "\t" : "") + f[i];
  return l;
}

struct corpus_case {
  std::string name;
  std::string text;
  uint64_t good_rows;
  // Expected examples "LINE:kind" in order (every malformed line here).
  std::vector<std::string> expect;
  std::string detail_has;  // a substring of the first example's detail
};

std::vector<corpus_case> corpus() {
  std::string g = line_with() + "\n";
  std::string long_field(65, 'a');
  return {
      {"too_few_fields", g + "1\t2\t3\n" + g, 2, {"2:field_count"}, "3 tab-separated fields, want 40"},
      {"too_many_fields", g + line_with() + "\textra\n" + g, 2, {"2:field_count"}, "41 tab-separated fields"},
      {"empty_line", g + "\n" + g, 2, {"2:field_count"}, "1 tab-separated field,"},
      {"non_numeric_integer", g + line_with({{7, "12x"}}) + "\n", 1, {"2:bad_integer"},
       "field 8 (I7) is \"12x\""},
      {"float_integer", line_with({{1, "1.5"}}) + "\n" + g, 1, {"1:bad_integer"}, "field 2 (I1)"},
      {"space_in_integer", line_with({{13, " 3"}}) + "\n" + g, 1, {"1:bad_integer"}, "(I13)"},
      {"lone_minus", line_with({{2, "-"}}) + "\n", 0, {"1:bad_integer"}, "(I2)"},
      {"nineteen_digits", line_with({{3, "1234567890123456789"}}) + "\n" + g, 1, {"1:bad_integer"},
       "at most 18 digits"},
      {"label_out_of_int32", line_with({{0, "4294967296"}}) + "\n" + g, 1, {"1:bad_integer"},
       "field 1 (label)"},
      {"over_long_categorical", g + g + line_with({{20, long_field}}) + "\n", 2, {"3:field_too_long"},
       "field 21 (C7) is 65 bytes long"},
      {"invalid_utf8_byte", g + line_with({{15, "ab\xff"}}) + "\n" + g, 2, {"2:invalid_utf8"}, "not valid UTF-8"},
      {"overlong_utf8", line_with({{15, "\xc0\x80"}}) + "\n" + g, 1, {"1:invalid_utf8"}, "UTF-8"},
      {"surrogate_utf8", line_with({{15, "\xed\xa0\x80"}}) + "\n" + g, 1, {"1:invalid_utf8"}, "UTF-8"},
      {"cut_utf8_sequence", line_with({{39, "x\xe2\x82"}}) + "\n" + g, 1, {"1:invalid_utf8"}, "UTF-8"},
      {"truncated_last_line", g + g + line_with(), 2, {"3:truncated"}, "no newline"},
      {"truncated_short_last_line", g + "0\t1\t2", 1, {"2:truncated"}, "no newline"},
      {"valid_utf8_is_fine", line_with({{15, "caf\xc3\xa9"}, {16, "\xf0\x9f\x98\x80"}}) + "\n", 1, {}, ""},
      {"empty_fields_are_fine", line_with({{0, ""}, {1, ""}, {14, ""}, {39, ""}}) + "\n", 1, {}, ""},
      {"many_kinds", g + "x\n" + line_with({{5, "?"}}) + "\n" + g + "\n" + line_with({{30, long_field}}) +
           "\n" + g + "tail",
       3, {"2:field_count", "3:bad_integer", "5:field_count", "6:field_too_long", "8:truncated"}, ""},
  };
}

uint64_t kind_count(const pp::malformed_report& r, const std::string& kind) {
  for (int i = 1; i < pp::malformed_kinds; ++i)
    if (kind == pp::to_string(static_cast<pp::malformed_kind>(i))) return r.by_kind[i];
  return ~0ull;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_case_has_its_report_under_skip) {
  for (const auto& c : corpus()) {
    BOOST_TEST_CONTEXT("case " << c.name) {
      fs::path d = scratch(c.name);
      std::string file = (d / (c.name + ".tsv")).string();
      std::ofstream(file, std::ios::binary) << c.text;
      for (int shards : {1, 3}) {
        pp::preprocess_options o;
        o.block_bytes = 64;  // many tiny blocks: line numbering across blocks and shards
        o.parallelism = 2;
        for (auto mode : {pp::categorical_mode::vocab, pp::categorical_mode::hash}) {
          o.mode = mode;
          auto r = pp::preprocess_local({file}, (d / "out").string(), shards, o);
          BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().to_string()));
          BOOST_CHECK_EQUAL(r->rows, c.good_rows);
          BOOST_CHECK_EQUAL(r->malformed.total, c.expect.size());
          BOOST_REQUIRE_EQUAL(r->malformed.examples.size(), c.expect.size());
          for (std::size_t i = 0; i < c.expect.size(); ++i) {
            auto& e = r->malformed.examples[i];
            BOOST_CHECK_EQUAL(std::to_string(e.line) + ":" + pp::to_string(e.kind), c.expect[i]);
            BOOST_CHECK_EQUAL(e.file, file);
            std::string kind = c.expect[i].substr(c.expect[i].find(':') + 1);
            BOOST_CHECK_GE(kind_count(r->malformed, kind), 1u);
          }
          if (!c.detail_has.empty())
            BOOST_CHECK_MESSAGE(r->malformed.examples[0].detail.find(c.detail_has) != std::string::npos,
                                "detail '" << r->malformed.examples[0].detail << "' lacks '" << c.detail_has << "'");
          uint64_t bytes = 0;
          for (int i = 0; i < shards; ++i) bytes += fs::file_size(d / "out" / pp::part_file_name(i));
          BOOST_CHECK_EQUAL(bytes, c.good_rows * 160);
          // The JSON report is valid enough to carry raw bytes safely.
          std::string j = r->malformed.to_json();
          BOOST_CHECK_EQUAL(j.find('\xff'), std::string::npos);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(policy_fail_names_file_and_line) {
  for (const auto& c : corpus()) {
    if (c.expect.empty()) continue;
    BOOST_TEST_CONTEXT("case " << c.name) {
      fs::path d = scratch(c.name + "-fail");
      std::string file = (d / "in.tsv").string();
      std::ofstream(file, std::ios::binary) << c.text;
      for (auto mode : {pp::categorical_mode::vocab, pp::categorical_mode::hash}) {
        pp::preprocess_options o;
        o.mode = mode;
        o.policy = pp::malformed_policy::fail;
        o.block_bytes = 64;
        auto r = pp::preprocess_local({file}, (d / "out").string(), 2, o);
        BOOST_REQUIRE(!r.has_value());
        BOOST_CHECK(r.error().code() == hetflow::errc::parse_error);
        std::string want = file + ":" + c.expect[0].substr(0, c.expect[0].find(':')) + ": " +
                           c.expect[0].substr(c.expect[0].find(':') + 1) + ": ";
        BOOST_CHECK_MESSAGE(r.error().message().rfind(want, 0) == 0,
                            "error '" << r.error().message() << "' does not start with '" << want << "'");
        // Nothing half-written is left behind as a part file.
        for (auto& e : fs::directory_iterator(d / "out"))
          BOOST_CHECK_MESSAGE(e.path().extension() != ".tmp", e.path().string());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(examples_are_capped_but_all_are_counted) {
  fs::path d = scratch("cap");
  std::string text;
  for (int i = 0; i < 100; ++i) text += (i % 2 ? line_with() : std::string("bad")) + "\n";
  std::string file = (d / "in.tsv").string();
  std::ofstream(file, std::ios::binary) << text;
  pp::preprocess_options o;
  o.max_examples = 5;
  o.block_bytes = 200;
  auto r = pp::preprocess_local({file}, (d / "out").string(), 4, o);
  BOOST_REQUIRE(r.has_value());
  BOOST_CHECK_EQUAL(r->malformed.total, 50u);
  BOOST_CHECK_EQUAL(r->malformed.by_kind[static_cast<int>(pp::malformed_kind::field_count)], 50u);
  BOOST_REQUIRE_EQUAL(r->malformed.examples.size(), 5u);
  for (int i = 0; i < 5; ++i) BOOST_CHECK_EQUAL(r->malformed.examples[i].line, static_cast<uint64_t>(2 * i + 1));
  BOOST_CHECK_EQUAL(r->rows, 50u);
}

BOOST_AUTO_TEST_CASE(line_numbers_count_per_file) {
  fs::path d = scratch("files");
  std::string g = line_with() + "\n";
  std::ofstream((d / "a.tsv").string(), std::ios::binary) << g << g << "oops\n";
  std::ofstream((d / "b.tsv").string(), std::ios::binary) << "oops\n" << g;
  pp::preprocess_options o;
  o.block_bytes = 64;
  auto r = pp::preprocess_local({(d / "a.tsv").string(), (d / "b.tsv").string()}, (d / "out").string(), 2, o);
  BOOST_REQUIRE(r.has_value());
  BOOST_REQUIRE_EQUAL(r->malformed.examples.size(), 2u);
  BOOST_CHECK_EQUAL(r->malformed.examples[0].to_string(),
                    (d / "a.tsv").string() + ":3: field_count: 1 tab-separated field, want 40");
  BOOST_CHECK_EQUAL(r->malformed.examples[1].file, (d / "b.tsv").string());
  BOOST_CHECK_EQUAL(r->malformed.examples[1].line, 1u);
}
