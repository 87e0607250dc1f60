// Criteo click data for dlrm: the preprocess output read back
// (criteo_dataset.hpp), table sizes without loading (model_options_for), the
// binary metrics (metrics.hpp, evaluate_model), and train_single learning
// dlrm on records whose label depends on the features.
#define BOOST_TEST_MODULE kernels_criteo
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/criteo_dataset.hpp"
#include "kernels/metrics.hpp"
#include "kernels/model.hpp"
#include "kernels/preprocess/criteo_record.hpp"
#include "kernels/preprocess/preprocess.hpp"
#include "kernels/preprocess/vocabulary.hpp"
#include "kernels/random.hpp"
#include "kernels/trainer.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
namespace fs = std::filesystem;
using record = preprocess::criteo_record;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("hetflow-criteo-" + std::to_string(::getpid()) + "-" + std::to_string(next()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  static int next() {
    static int n = 0;
    return n++;
  }
};

// Record i of a plain test set: label i % 2, dense j = i + j / 16, id t = (i * 7 + t) % 11.
record plain_record(int64_t i) {
  record r{};
  r.label = int32_t(i % 2);
  for (int j = 0; j < 13; ++j) r.dense[j] = float(i) + float(j) / 16.0f;
  for (int t = 0; t < 26; ++t) r.sparse[t] = int32_t((i * 7 + t) % 11);
  return r;
}

void write_part(const fs::path& dir, int index, const std::vector<record>& recs) {
  std::ofstream out(dir / criteo_part_name(index), std::ios::binary);
  out.write(reinterpret_cast<const char*>(recs.data()), std::streamsize(recs.size() * sizeof(record)));
}

// Parts of sizes `sizes` holding plain records 0, 1, 2, ... in order.
void write_plain(const fs::path& dir, const std::vector<int64_t>& sizes) {
  int64_t next = 0;
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    std::vector<record> recs;
    for (int64_t i = 0; i < sizes[p]; ++i) recs.push_back(plain_record(next++));
    write_part(dir, int(p), recs);
  }
}

void write_vocabularies(const fs::path& dir, int lines_per_column, int skip_column = -1) {
  for (int t = 0; t < 26; ++t) {
    if (t == skip_column) continue;
    std::ofstream out(dir / criteo_vocab_name(t));
    for (int i = 0; i < lines_per_column + t; ++i) out << "s" << i << "\t" << (i + 3) << "\n";
  }
}

train_config criteo_config(const std::string& dir) {
  train_config c;
  c.model = "dlrm";
  c.data.kind = dataset_kind::criteo;
  c.data.path = dir;
  c.dlrm.embedding_dim = 4;
  c.dlrm.bottom_mlp = {8};
  c.dlrm.top_mlp = {8};
  c.threads = 2;
  return c;
}

void check_row(const image_dataset& d, int64_t row, int64_t record_index) {
  const record r = plain_record(record_index);
  const float* x = d.images.f32() + row * 39;
  BOOST_CHECK_EQUAL(d.labels[std::size_t(row)], r.label);
  for (int j = 0; j < 13; ++j) BOOST_CHECK_EQUAL(x[j], r.dense[j]);
  for (int t = 0; t < 26; ++t) BOOST_CHECK_EQUAL(x[13 + t], float(r.sparse[t]));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(criteo_dataset)

BOOST_AUTO_TEST_CASE(names_match_the_preprocess_job) {
  for (int i : {0, 1, 17, 12345}) BOOST_CHECK_EQUAL(criteo_part_name(i), preprocess::part_file_name(i));
  for (int c : {0, 9, 25}) BOOST_CHECK_EQUAL(criteo_vocab_name(c), preprocess::vocab_file_name(c));
}

BOOST_AUTO_TEST_CASE(loads_parts_in_index_order) {
  temp_dir d;
  write_plain(d.path, {5, 0, 7});  // an empty part: a node whose slice had no rows
  std::ofstream(d.path / "part-00003.bin.tmp") << "staged, not data";
  auto r = load_criteo(d.str());
  BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
  BOOST_CHECK_EQUAL(r->total_rows, 12);
  BOOST_CHECK_EQUAL(r->data.size(), 12);
  BOOST_CHECK_EQUAL(r->data.classes, 2);
  BOOST_CHECK(r->data.images.shape() == (shape{12, 39}));
  BOOST_CHECK(r->data.sample_shape() == shape{39});
  for (int64_t i = 0; i < 12; ++i) check_row(r->data, i, i);
  for (int t = 0; t < 26; ++t) {
    int32_t want = -1;
    for (int64_t i = 0; i < 12; ++i) want = std::max(want, plain_record(i).sparse[t]);
    BOOST_CHECK_EQUAL(r->max_id[std::size_t(t)], want);
  }
  auto first6 = load_criteo(d.str(), 6);
  BOOST_REQUIRE(first6.has_value());
  BOOST_CHECK_EQUAL(first6->data.size(), 6);
  BOOST_CHECK_EQUAL(first6->total_rows, 12);
  check_row(first6->data, 5, 5);
}

// Streamed input's random access (criteo_records): rows across parts (one
// empty), max_rows, load_range == load_criteo, and errors naming the part
// file and record for an id beyond its table, and the bad row for a range.
BOOST_AUTO_TEST_CASE(records_read_any_rows_as_load_criteo_does) {
  temp_dir d;
  write_plain(d.path, {5, 0, 7});
  auto recs = criteo_records::open(d.str());
  BOOST_REQUIRE_MESSAGE(recs.has_value(), recs.error().to_string());
  BOOST_CHECK_EQUAL(recs->rows(), 12);
  BOOST_CHECK_EQUAL(recs->parts(), 3);
  std::vector<int64_t> ids{11, 0, 5, 4, 5};
  image_dataset got;
  got.images = tensor::empty(shape{int64_t(ids.size()), 39});
  got.labels.resize(ids.size());
  BOOST_REQUIRE(recs->read_rows(ids, got.images.f32_span(), got.labels).ok());
  for (std::size_t j = 0; j < ids.size(); ++j) check_row(got, int64_t(j), ids[j]);
  auto all = load_criteo(d.str());
  auto range = recs->load_range(0, 12);
  BOOST_REQUIRE(all.has_value() && range.has_value());
  BOOST_CHECK(std::vector<float>(range->images.f32(), range->images.f32() + 12 * 39) ==
              std::vector<float>(all->data.images.f32(), all->data.images.f32() + 12 * 39));
  auto first6 = criteo_records::open(d.str(), 6);
  BOOST_REQUIRE(first6.has_value());
  BOOST_CHECK_EQUAL(first6->rows(), 6);
  std::vector<int64_t> past{6};
  auto st = first6->read_rows(past, std::span<float>(got.images.f32(), 39), std::span<int32_t>(got.labels.data(), 1));
  BOOST_CHECK(!st.ok() && contains(st.message(), "row 6"));
  // Record 7 (the 3rd of part-00002) has ids up to 10: tables of 10 rows refuse it.
  std::vector<int64_t> tables(26, 10), seven{7};
  st = recs->read_rows(seven, std::span<float>(got.images.f32(), 39), std::span<int32_t>(got.labels.data(), 1), tables);
  BOOST_CHECK_MESSAGE(!st.ok() && contains(st.message(), "part-00002.bin record 2") && contains(st.message(), "10 rows"),
                      st.message());
}

BOOST_AUTO_TEST_CASE(training_data_is_the_head_test_data_the_tail) {
  temp_dir d;
  write_plain(d.path, {40, 60});
  train_config c = criteo_config(d.str());
  c.data.test_fraction = 0.25;
  auto data = load_training_data(c, /*normalize=*/true);
  BOOST_REQUIRE_MESSAGE(data.has_value(), data.error().to_string());
  BOOST_REQUIRE_EQUAL(data->train.size(), 75);
  BOOST_REQUIRE_EQUAL(data->test.size(), 25);
  BOOST_CHECK(data->train.images.shape() == (shape{75, 39}));
  for (int64_t i : {0, 39, 40, 74}) check_row(data->train, i, i);  // as stored: not normalised
  for (int64_t i : {0, 24}) check_row(data->test, i, 75 + i);
  BOOST_CHECK(data->stats.mean.empty());
  c.data.max_rows = 20;
  auto head = load_training_data(c, true);
  BOOST_REQUIRE(head.has_value());
  BOOST_CHECK_EQUAL(head->train.size(), 15);
  BOOST_CHECK_EQUAL(head->test.size(), 5);
  check_row(head->test, 4, 19);
  c.data.max_rows = 1;  // 1 row cannot make both sets
  auto tiny = load_training_data(c, true);
  BOOST_REQUIRE(!tiny.has_value());
  BOOST_CHECK(contains(tiny.error().message(), "test_fraction"));
}

BOOST_AUTO_TEST_CASE(errors_name_the_file) {
  temp_dir d;
  auto missing = load_criteo((d.path / "nope").string());
  BOOST_REQUIRE(!missing.has_value());
  BOOST_CHECK(missing.error().code() == errc::not_found);
  BOOST_CHECK(contains(missing.error().message(), "nope"));

  auto empty = load_criteo(d.str());
  BOOST_REQUIRE(!empty.has_value());
  BOOST_CHECK(empty.error().code() == errc::not_found);
  BOOST_CHECK_MESSAGE(contains(empty.error().message(), "no part-NNNNN.bin"), empty.error().message());

  write_plain(d.path, {3});
  write_part(d.path, 2, {plain_record(3)});
  auto gap = load_criteo(d.str());
  BOOST_REQUIRE(!gap.has_value());
  BOOST_CHECK_MESSAGE(contains(gap.error().message(), "part-00001.bin"), gap.error().message());
  fs::remove(d.path / "part-00002.bin");

  {
    std::ofstream out(d.path / "part-00001.bin", std::ios::binary);
    out << std::string(161, 'x');
  }
  auto ragged = load_criteo(d.str());
  BOOST_REQUIRE(!ragged.has_value());
  BOOST_CHECK(ragged.error().code() == errc::parse_error);
  BOOST_CHECK_MESSAGE(contains(ragged.error().message(), "part-00001.bin") &&
                          contains(ragged.error().message(), "multiple of the 160"),
                      ragged.error().message());

  auto with_bad = [&](auto edit) {
    std::vector<record> recs{plain_record(3), plain_record(4), plain_record(5)};
    edit(recs[2]);
    write_part(d.path, 1, recs);
    return load_criteo(d.str());
  };
  auto label = with_bad([](record& r) { r.label = 2; });
  BOOST_REQUIRE(!label.has_value());
  BOOST_CHECK(label.error().code() == errc::parse_error);
  BOOST_CHECK_MESSAGE(contains(label.error().message(), "part-00001.bin record 2 has label 2"),
                      label.error().message());
  auto negative = with_bad([](record& r) { r.sparse[4] = -1; });
  BOOST_REQUIRE(!negative.has_value());
  BOOST_CHECK(negative.error().code() == errc::parse_error);
  BOOST_CHECK_MESSAGE(contains(negative.error().message(), "part-00001.bin record 2 has negative id -1 in column C5"),
                      negative.error().message());
  auto big = with_bad([](record& r) { r.sparse[25] = 1 << 24; });
  BOOST_REQUIRE(!big.has_value());
  BOOST_CHECK(big.error().code() == errc::unsupported);
  BOOST_CHECK_MESSAGE(contains(big.error().message(), "column C26") && contains(big.error().message(), "2^24") &&
                          contains(big.error().message(), "hash range") &&
                          contains(big.error().message(), "min_count"),
                      big.error().message());
  // The largest exact id is fine.
  auto edge = with_bad([](record& r) { r.sparse[25] = (1 << 24) - 1; });
  BOOST_REQUIRE_MESSAGE(edge.has_value(), edge.error().to_string());
  BOOST_CHECK_EQUAL(edge->data.images.f32()[5 * 39 + 38], float((1 << 24) - 1));
  // The hash-mode scan checks the same.
  (void)with_bad([](record& r) { r.label = -1; });
  auto scan = criteo_table_rows(d.str());
  BOOST_REQUIRE(!scan.has_value());
  BOOST_CHECK_MESSAGE(contains(scan.error().message(), "part-00001.bin record 2 has label -1"), scan.error().message());
}

BOOST_AUTO_TEST_CASE(table_rows_from_vocabularies_or_a_scan) {
  temp_dir d;
  write_plain(d.path, {30});
  // Hash mode: the largest id + 1 per column.
  auto hashed = criteo_table_rows(d.str());
  BOOST_REQUIRE_MESSAGE(hashed.has_value(), hashed.error().to_string());
  BOOST_CHECK(!hashed->from_vocabularies);
  BOOST_REQUIRE_EQUAL(hashed->rows.size(), 26u);
  for (int64_t r : hashed->rows) BOOST_CHECK_EQUAL(r, 11);  // ids (i * 7 + t) % 11 over 30 rows cover 0..10

  train_config c = criteo_config(d.str());
  auto zo = model_options_for(c);
  BOOST_REQUIRE_MESSAGE(zo.has_value(), zo.error().to_string());
  BOOST_CHECK(zo->input == shape{39});
  BOOST_CHECK_EQUAL(zo->classes, 2);
  BOOST_CHECK(zo->dlrm.table_rows == hashed->rows);
  BOOST_CHECK_EQUAL(zo->dlrm.embedding_dim, 4);
  BOOST_CHECK(zo->dlrm.bottom_mlp == std::vector<int64_t>{8});
  BOOST_CHECK(zo->dlrm_top_mlp == std::vector<int64_t>{8});
  BOOST_CHECK(make_model_spec("dlrm", *zo).has_value());

  // One table_rows value stands for every table; no scan.
  c.data.table_rows = {1000};
  zo = model_options_for(c);
  BOOST_REQUIRE(zo.has_value());
  BOOST_CHECK(zo->dlrm.table_rows == std::vector<int64_t>(26, 1000));
  c.data.table_rows = {5};  // too small for ids up to 10
  auto small = load_training_data(c, false);
  BOOST_REQUIRE(!small.has_value());
  BOOST_CHECK_MESSAGE(contains(small.error().message(), "table_rows"), small.error().message());
  c.data.table_rows = {1, 2};
  BOOST_CHECK(!model_options_for(c).has_value());
  c.data.table_rows.clear();

  // Vocab mode: lines + 1 (the OOV slot); column t has 12 + t lines here.
  write_vocabularies(d.path, 12);
  auto vocab = criteo_table_rows(d.str());
  BOOST_REQUIRE_MESSAGE(vocab.has_value(), vocab.error().to_string());
  BOOST_CHECK(vocab->from_vocabularies);
  for (int t = 0; t < 26; ++t) BOOST_CHECK_EQUAL(vocab->rows[std::size_t(t)], 13 + t);
  BOOST_CHECK(load_training_data(c, false).has_value());
  // Vocabularies smaller than the ids: from another run.
  write_vocabularies(d.path, 5);
  auto stale = load_training_data(c, false);
  BOOST_REQUIRE(!stale.has_value());
  BOOST_CHECK_MESSAGE(contains(stale.error().message(), "vocab-0") &&
                          contains(stale.error().message(), "not from the run"),
                      stale.error().message());
  fs::remove(d.path / criteo_vocab_name(7));
  auto partial = criteo_table_rows(d.str());
  BOOST_REQUIRE(!partial.has_value());
  BOOST_CHECK_MESSAGE(contains(partial.error().message(), "vocab-07.tsv"), partial.error().message());
}

BOOST_AUTO_TEST_CASE(dlrm_and_criteo_go_together) {
  train_config c;
  c.model = "dlrm";
  c.data.kind = dataset_kind::synthetic;
  auto a = model_options_for(c);
  BOOST_REQUIRE(!a.has_value());
  BOOST_CHECK_MESSAGE(contains(a.error().message(), "criteo"), a.error().message());
  BOOST_CHECK(!train_single(c).has_value());
  temp_dir d;
  write_plain(d.path, {10});
  c = criteo_config(d.str());
  c.model = "mlp";
  auto b = model_options_for(c);
  BOOST_REQUIRE(!b.has_value());
  BOOST_CHECK_MESSAGE(contains(b.error().message(), "dlrm"), b.error().message());
  // Image datasets keep their shapes.
  train_config img;
  img.data.kind = dataset_kind::synthetic;
  img.data.sample = shape{3, 8, 8};
  img.data.classes = 4;
  auto zo = model_options_for(img);
  BOOST_REQUIRE(zo.has_value());
  BOOST_CHECK(zo->input == (shape{3, 8, 8}));
  BOOST_CHECK_EQUAL(zo->classes, 4);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(metrics)

// The definition: pairs (positive, negative), 1 when the positive scores
// higher, 1/2 for a tie.
double reference_auc(const std::vector<float>& s, const std::vector<int32_t>& y) {
  double wins = 0, pairs = 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    for (std::size_t j = 0; j < s.size(); ++j)
      if (y[i] == 1 && y[j] != 1) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

BOOST_AUTO_TEST_CASE(auc_matches_the_pairwise_definition) {
  // Hand-checked: scores 0.1 0.4 0.35 0.8, labels 0 0 1 1 -> 0.75.
  BOOST_CHECK_CLOSE(roc_auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<int32_t>{0, 0, 1, 1}), 0.75,
                    1e-9);
  // Every score tied: 0.5.
  BOOST_CHECK_CLOSE(roc_auc(std::vector<float>(6, 0.3f), std::vector<int32_t>{0, 1, 0, 1, 1, 0}), 0.5, 1e-9);
  BOOST_CHECK_CLOSE(roc_auc(std::vector<float>{1, 2, 3}, std::vector<int32_t>{0, 0, 1}), 1.0, 1e-9);
  BOOST_CHECK_EQUAL(roc_auc(std::vector<float>{3, 2, 1}, std::vector<int32_t>{0, 0, 1}), 0.0);
  // One class only: undefined.
  BOOST_CHECK_EQUAL(roc_auc(std::vector<float>{1, 2}, std::vector<int32_t>{1, 1}), -1.0);
  BOOST_CHECK_EQUAL(roc_auc(std::vector<float>{1, 2}, std::vector<int32_t>{0}), -1.0);
  rng g(7);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 50 + std::size_t(g.below(400));
    // Few distinct scores: many ties, within and across the classes.
    const uint64_t levels = trial % 2 == 0 ? 5 : 1000;
    std::vector<float> s(n);
    std::vector<int32_t> y(n);
    for (std::size_t i = 0; i < n; ++i) {
      y[i] = int32_t(g.below(2));
      s[i] = float(g.below(levels)) / float(levels) + (y[i] == 1 ? 0.1f * float(trial % 3) : 0.0f);
    }
    BOOST_CHECK_CLOSE(roc_auc(s, y), reference_auc(s, y), 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(evaluate_model_logloss_auc_accuracy) {
  zoo_options zo;
  zo.input = shape{39};
  zo.classes = 2;
  zo.dlrm = dlrm_spec{13, std::vector<int64_t>(26, 11), 4, {8}};
  zo.dlrm_top_mlp = {8};
  auto spec = make_model_spec("dlrm", zo);
  BOOST_REQUIRE(spec.has_value());
  auto m = build_model(*spec, device::cpu(), build_options{2, 3});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  image_dataset test;
  test.classes = 2;
  const int64_t n = 101;
  test.images = tensor::empty(shape{n, 39});
  for (int64_t i = 0; i < n; ++i) {
    const record r = plain_record(i);
    float* x = test.images.f32() + i * 39;
    for (int j = 0; j < 13; ++j) x[j] = std::log1p(r.dense[j]) - 2.0f;
    for (int t = 0; t < 26; ++t) x[13 + t] = float(r.sparse[t]);
    test.labels.push_back(int32_t((i * 5) % 3 == 0));
  }
  // The reference: one forward over everything, then the definitions.
  auto all = m->forward(test.images.view(), mode::eval);
  BOOST_REQUIRE(all.has_value());
  std::vector<float> p1(static_cast<std::size_t>(n));
  double ll = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double l0 = all->f32()[2 * i], l1 = all->f32()[2 * i + 1];
    const double p = 1.0 / (1.0 + std::exp(l0 - l1));
    p1[std::size_t(i)] = float(p);
    const int32_t y = test.labels[std::size_t(i)];
    ll -= y == 1 ? std::log(p) : std::log(1.0 - p);
    correct += ((l1 > l0) ? 1 : 0) == y;
  }
  ll /= double(n);
  auto em = evaluate_model(*m, test, 16);  // 7 batches, the last partial
  BOOST_REQUIRE_MESSAGE(em.has_value(), em.error().to_string());
  BOOST_TEST_MESSAGE("logloss " << em->logloss << " auc " << em->auc << " accuracy " << em->accuracy);
  BOOST_CHECK_CLOSE(em->logloss, ll, 1e-3);
  BOOST_CHECK_CLOSE(em->auc, roc_auc(p1, test.labels), 1e-6);
  BOOST_CHECK_CLOSE(em->accuracy, double(correct) / double(n), 1e-9);
  // More than 2 classes: accuracy only.
  image_dataset three = {tensor::from(test.images.view()), test.labels, 3};
  zo.classes = 3;
  auto m3 = build_model(*make_model_spec("dlrm", zo), device::cpu(), build_options{2, 3});
  BOOST_REQUIRE(m3.has_value());
  auto e3 = evaluate_model(*m3, three, 50);
  BOOST_REQUIRE(e3.has_value());
  BOOST_CHECK(e3->accuracy >= 0 && e3->logloss == -1 && e3->auc == -1);
  auto none = evaluate_model(*m, image_dataset{tensor::empty(shape{0, 39}), {}, 2}, 8);
  BOOST_REQUIRE(none.has_value());
  BOOST_CHECK(none->accuracy == -1 && none->auc == -1);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(dlrm_training)

// Records whose click depends on the features: a hidden weight per (table,
// id) on every table plus the first dense feature; label = the sign of the
// sum, flipped with probability 0.1 (so the best AUC is about 0.9).
void write_learnable(const fs::path& dir, int64_t rows, uint64_t seed) {
  rng g(seed);
  const int ids = 20;
  std::vector<std::vector<double>> w(26, std::vector<double>(std::size_t(ids)));
  for (auto& col : w)
    for (double& v : col) v = g.uniform() * 2.0 - 1.0;
  std::vector<record> recs;
  for (int64_t i = 0; i < rows; ++i) {
    record r{};
    for (int j = 0; j < 13; ++j) r.dense[j] = float(g.uniform() * 4.0);
    double score = (r.dense[0] - 2.0) * 0.5;
    for (int t = 0; t < 26; ++t) {
      r.sparse[t] = int32_t(g.below(uint64_t(ids)));
      score += 0.3 * w[std::size_t(t)][std::size_t(r.sparse[t])];
    }
    const bool click = score > 0;
    r.label = (g.uniform() < 0.1) != click ? 1 : 0;
    recs.push_back(r);
  }
  // Two parts, as a 2-node preprocess run writes them.
  write_part(dir, 0, std::vector<record>(recs.begin(), recs.begin() + rows / 2));
  write_part(dir, 1, std::vector<record>(recs.begin() + rows / 2, recs.end()));
}

BOOST_AUTO_TEST_CASE(train_single_learns_clicks) {
  temp_dir d;
  write_learnable(d.path, 6000, 11);
  train_config c = criteo_config(d.str());  // embedding_dim 4, MLPs of 8
  c.epochs = 3;
  c.batch_size = 64;
  // lr 0.01 overfits these 5400 rows by epoch 3 (test AUC 0.79 after 0.82).
  c.optimizer = {optimizer_kind::adam, 0.003, 0.9};
  c.progress_every = 0;
  auto rep = train_single(c);
  BOOST_REQUIRE_MESSAGE(rep.has_value(), rep.error().to_string());
  BOOST_REQUIRE_EQUAL(rep->epochs.size(), 3u);
  for (const auto& e : rep->epochs)
    BOOST_TEST_MESSAGE("epoch " << e.epoch << ": loss " << e.loss << ", test logloss " << e.test_logloss
                                << ", test AUC " << e.test_auc << ", test accuracy " << e.test_accuracy << ", "
                                << e.samples_per_s << " samples/s");
  const auto& last = rep->epochs.back();
  BOOST_CHECK_EQUAL(last.samples, 5400);
  // 600 test rows: a model that learned nothing has AUC 0.5 +- 0.024 (1 sd);
  // 0.75 is 10 sd away. The labels' own ceiling is about 0.9; this reaches
  // about 0.83 (logloss 0.51).
  BOOST_CHECK_GT(last.test_auc, 0.75);
  // Chance (predicting the click rate, ~0.5 here) has logloss ~0.693.
  BOOST_CHECK_GT(last.test_logloss, 0.0);
  BOOST_CHECK_LT(last.test_logloss, 0.6);
  BOOST_CHECK_GT(last.test_accuracy, 0.65);
  BOOST_CHECK_LT(last.loss, rep->epochs.front().loss);
}

BOOST_AUTO_TEST_SUITE_END()
