// dataset criteo_text (kernels/criteo_text.hpp): raw Criteo text read as dlrm
// input equals, bit for bit, what a hash-mode preprocess job writes from the
// same text and load_criteo reads back: the same rows (malformed lines
// skipped and counted alike), the same floats and ids; training on either
// gives the same losses and weights.
#define BOOST_TEST_MODULE kernels_criteo_text
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/criteo_dataset.hpp"
#include "kernels/criteo_text.hpp"
#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/synthetic_criteo.hpp"
#include "kernels/random.hpp"
#include "kernels/trainer.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
namespace fs = std::filesystem;
namespace pp = hetflow::kernels::preprocess;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("hetflow-criteo-text-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Fields of a line (no newline) joined by tabs.
std::string join(const std::vector<std::string>& f) {
  std::string l;
  for (std::size_t i = 0; i < f.size(); ++i) l += (i ? "\t" : "") + f[i];
  return l + "\n";
}

// A good line's 40 fields, `field` replaced by `value`.
std::string edited_line(uint64_t row, int field, const std::string& value) {
  std::string l;
  pp::synthetic_criteo_line(11, row, l);
  l.pop_back();
  std::vector<std::string> f;
  for (std::size_t b = 0;;) {
    auto e = l.find('\t', b);
    f.push_back(l.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  f.at(std::size_t(field)) = value;
  return join(f);
}

// Two files of synthetic rows with malformed lines of every kind among them;
// the second ends without a newline (truncated).
std::vector<std::string> write_inputs(const fs::path& dir) {
  std::string a, b;
  for (uint64_t r = 0; r < 3000; ++r) {
    pp::synthetic_criteo_line(11, r, a);
    if (r == 5) a += "1\t2\t3\n";                                    // field_count (a.tsv:7)
    if (r == 700) a += edited_line(100000, 3, "12x");                // bad_integer (I3)
    if (r == 1500) a += edited_line(100001, 20, std::string(80, 'z'));  // field_too_long
    if (r == 2000) a += edited_line(100002, 30, "\xff\xfe");          // invalid_utf8
    if (r == 2999) a += "\n";                                        // empty line: field_count
  }
  for (uint64_t r = 3000; r < 3700; ++r) pp::synthetic_criteo_line(11, r, b);
  b += "0\t1\t2";  // truncated: no newline at the end of the file
  std::vector<std::string> paths{(dir / "a.tsv").string(), (dir / "b.tsv").string()};
  std::ofstream(paths[0], std::ios::binary) << a;
  std::ofstream(paths[1], std::ios::binary) << b;
  return paths;
}

criteo_text_options text_options(const std::vector<std::string>& inputs, uint64_t range) {
  criteo_text_options o;
  o.inputs = inputs;
  o.hash_range = range;
  return o;
}

struct fixture {
  temp_dir dir;
  std::vector<std::string> inputs = write_inputs(dir.path);
  static constexpr uint64_t range = 5000;
  std::string out = (dir.path / "out").string();
  pp::local_result pre;
  criteo_rows records;
  fixture() {
    pp::preprocess_options opt;
    opt.mode = pp::categorical_mode::hash;
    opt.hash_range = range;
    opt.parallelism = 2;
    fs::create_directories(out);
    auto r = pp::preprocess_local(inputs, out, /*shards=*/3, opt);
    BOOST_TEST_REQUIRE(r.has_value(), (r ? "" : r.error().to_string()));
    pre = std::move(*r);
    auto rows = load_criteo(out);
    BOOST_TEST_REQUIRE(rows.has_value());
    records = std::move(*rows);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(rows_equal_a_hash_mode_preprocess_output_bit_for_bit, fixture) {
  auto t = criteo_text::open(text_options(inputs, range));
  BOOST_TEST_REQUIRE(t.has_value(), (t ? "" : t.error().to_string()));
  BOOST_TEST(t->rows() == 3700);
  BOOST_TEST(t->rows() == records.data.size());
  BOOST_TEST(t->lines() == 3700u + 6u);
  // Malformed lines: counted per kind and reported at the same file:line.
  const auto& m = t->malformed();
  BOOST_TEST(m.total == 6u);
  BOOST_TEST(m.total == pre.malformed.total);
  for (int k = 0; k < pp::malformed_kinds; ++k) BOOST_TEST(m.by_kind[std::size_t(k)] == pre.malformed.by_kind[std::size_t(k)]);
  BOOST_TEST(m.by_kind[std::size_t(pp::malformed_kind::field_count)] == 2u);
  BOOST_TEST(m.by_kind[std::size_t(pp::malformed_kind::truncated)] == 1u);
  BOOST_TEST_REQUIRE(m.examples.size() == pre.malformed.examples.size());
  for (std::size_t i = 0; i < m.examples.size(); ++i) BOOST_TEST(m.examples[i].to_string() == pre.malformed.examples[i].to_string());
  BOOST_TEST(m.examples[0].to_string().find("a.tsv:7: field_count") != std::string::npos, m.examples[0].to_string());

  auto all = t->load_range(0, t->rows());
  BOOST_TEST_REQUIRE(all.has_value());
  BOOST_TEST(all->labels == records.data.labels);
  BOOST_TEST_REQUIRE(all->images.numel() == records.data.images.numel());
  BOOST_TEST(std::memcmp(all->images.f32(), records.data.images.f32(), std::size_t(all->images.numel()) * 4) == 0);
  // Rows by id (a batch in shuffled order) are the same rows.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 300; ++i) ids.push_back((i * 7919) % t->rows());
  std::vector<float> x(ids.size() * criteo_columns);
  std::vector<int32_t> y(ids.size());
  BOOST_TEST_REQUIRE(t->read_rows(ids, x, y).ok());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    BOOST_TEST(y[i] == records.data.labels[std::size_t(ids[i])]);
    BOOST_TEST(std::memcmp(&x[i * criteo_columns], records.data.images.f32() + ids[i] * criteo_columns,
                           criteo_columns * 4) == 0);
  }
  BOOST_TEST(!t->read_rows(std::vector<int64_t>{t->rows()}, std::span<float>(x).first(39), std::span<int32_t>(y).first(1)).ok());
  BOOST_TEST(t->to_json().find("\"malformed\":{\"total\":6") != std::string::npos, t->to_json());
}

BOOST_FIXTURE_TEST_CASE(training_on_text_equals_training_on_the_records, fixture) {
  train_config c;
  c.model = "dlrm";
  c.dlrm.embedding_dim = 4;
  c.dlrm.bottom_mlp = {8};
  c.dlrm.top_mlp = {8};
  c.epochs = 2;
  c.batch_size = 100;
  c.threads = 1;
  c.optimizer = optimizer_config{optimizer_kind::adam, 0.01, 0.9};
  c.data.test_fraction = 0.1;
  train_config rec = c, text = c;
  rec.data.kind = dataset_kind::criteo;
  rec.data.path = out;
  rec.data.table_rows = {int64_t(range)};
  text.data.kind = dataset_kind::criteo_text;
  text.data.inputs = inputs;
  text.data.hash_range = range;
  auto a = train_single(rec);
  auto b = train_single(text);
  BOOST_TEST_REQUIRE(a.has_value(), (a ? "" : a.error().to_string()));
  BOOST_TEST_REQUIRE(b.has_value(), (b ? "" : b.error().to_string()));
  BOOST_TEST_REQUIRE(a->epochs.size() == 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    BOOST_TEST(a->epochs[e].loss == b->epochs[e].loss);
    BOOST_TEST(a->epochs[e].test_auc == b->epochs[e].test_auc);
    BOOST_TEST(a->epochs[e].samples == 3330);
  }
  BOOST_TEST(a->weights_checksum == b->weights_checksum);
  // The model's tables have `range` rows each.
  auto zo = model_options_for(text);
  BOOST_TEST_REQUIRE(zo.has_value());
  BOOST_TEST(zo->dlrm.table_rows == std::vector<int64_t>(26, int64_t(range)));
}

BOOST_AUTO_TEST_CASE(max_rows_split_and_errors) {
  temp_dir dir;
  auto inputs = write_inputs(dir.path);
  auto o = text_options(inputs, 100);
  o.max_rows = 1000;
  auto t = criteo_text::open(o);
  BOOST_TEST_REQUIRE(t.has_value());
  BOOST_TEST(t->rows() == 1000);
  BOOST_TEST(t->total_rows() == 3700);
  auto s = split_criteo_rows(t->rows(), 0.1, "x");
  BOOST_TEST_REQUIRE(s.has_value());
  BOOST_TEST(s->train == 900);
  BOOST_TEST(s->test == 100);
  BOOST_TEST(!split_criteo_rows(5, 0.01, "x").has_value());
  // Ids travel as float32: no range beyond 2^24.
  BOOST_TEST((criteo_text::open(text_options(inputs, (uint64_t{1} << 24) + 1)).error().code() == errc::invalid_argument));
  BOOST_TEST((criteo_text::open(text_options(inputs, 0)).error().code() == errc::invalid_argument));
  auto missing = criteo_text::open(text_options({(dir.path / "nope.tsv").string()}, 10));
  BOOST_TEST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().to_string().find("nope.tsv") != std::string::npos);
  // A label other than 0/1 is refused, naming the file and line.
  const std::string bad = (dir.path / "bad.tsv").string();
  {
    std::string l;
    pp::synthetic_criteo_line(1, 0, l);
    pp::synthetic_criteo_line(1, 1, l);
    l += edited_line(5, 0, "2");
    std::ofstream(bad, std::ios::binary) << l;
  }
  auto b = criteo_text::open(text_options({bad}, 10));
  BOOST_TEST_REQUIRE(!b.has_value());
  BOOST_TEST((b.error().code() == errc::parse_error));
  BOOST_TEST(b.error().to_string().find("bad.tsv:3: label 2") != std::string::npos, b.error().to_string());
  // Only malformed lines: no rows.
  const std::string junk = (dir.path / "junk.tsv").string();
  std::ofstream(junk, std::ios::binary) << "a\tb\n\n";
  BOOST_TEST((criteo_text::open(text_options({junk}, 10)).error().code() == errc::not_found));
}
