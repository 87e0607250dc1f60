// Datasets: IDX parsing (gzip and raw), Fashion-MNIST when installed,
// synthetic images, normalisation.
#define BOOST_TEST_MODULE kernels_dataset
#include <boost/test/unit_test.hpp>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/dataset.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("hetflow_kernels_dataset_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

void write_idx(const fs::path& p, uint32_t magic, std::vector<uint32_t> dims, const std::vector<uint8_t>& data,
               bool gz) {
  std::vector<uint8_t> bytes = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    BOOST_REQUIRE(f);
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

void write_set(const fs::path& dir, const std::string& prefix, int n, bool gz, int bad_label = -1) {
  std::vector<uint8_t> px(static_cast<std::size_t>(n) * 4 * 3), lb(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7);
  for (int i = 0; i < n; ++i) lb[std::size_t(i)] = uint8_t(i % 10);
  if (bad_label >= 0) lb[0] = uint8_t(bad_label);
  std::string ext = gz ? ".gz" : "";
  write_idx(dir / (prefix + "-images-idx3-ubyte" + ext), 0x803, {uint32_t(n), 4, 3}, px, gz);
  write_idx(dir / (prefix + "-labels-idx1-ubyte" + ext), 0x801, {uint32_t(n)}, lb, gz);
}

}  // namespace

BOOST_AUTO_TEST_CASE(reads_gzip_and_raw_idx) {
  for (bool gz : {true, false}) {
    temp_dir d;
    write_set(d.path, "train", 5, gz);
    auto ds = load_fashion_mnist(d.path.string(), true);
    BOOST_REQUIRE_MESSAGE(ds.has_value(), ds.error().to_string());
    BOOST_CHECK(ds->images.shape() == (shape{5, 1, 4, 3}));
    BOOST_CHECK(ds->sample_shape() == (shape{1, 4, 3}));
    BOOST_CHECK_EQUAL(ds->labels[3], 3);
    BOOST_CHECK_CLOSE(ds->images.f32()[1], 7.0f / 255.0f, 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(the_first_rows_read_only_what_they_need_and_equal_the_whole_sets) {
  // 28 x 28 images (the bounded read's size) in gzip and raw files: the first
  // rows are the whole set's first rows; more rows than the set has give
  // the whole set; a file cut short past the wanted rows still reads them.
  for (bool gz : {true, false}) {
    temp_dir d;
    const int n = 7;
    std::vector<uint8_t> px(static_cast<std::size_t>(n) * 28 * 28), lb(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 13 + 5);
    for (int i = 0; i < n; ++i) lb[std::size_t(i)] = uint8_t((i * 3) % 10);
    const std::string ext = gz ? ".gz" : "";
    write_idx(d.path / ("train-images-idx3-ubyte" + ext), 0x803, {uint32_t(n), 28, 28}, px, gz);
    write_idx(d.path / ("train-labels-idx1-ubyte" + ext), 0x801, {uint32_t(n)}, lb, gz);
    auto all = load_fashion_mnist(d.path.string(), true);
    BOOST_REQUIRE_MESSAGE(all.has_value(), all.error().to_string());
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{7}, int64_t{50}}) {
      BOOST_TEST_CONTEXT("gz " << gz << " rows " << rows) {
        auto part = load_fashion_mnist(d.path.string(), true, rows);
        BOOST_REQUIRE_MESSAGE(part.has_value(), part.error().to_string());
        const int64_t want = std::min<int64_t>(rows, n);
        BOOST_CHECK(part->images.shape() == (shape{want, 1, 28, 28}));
        BOOST_REQUIRE_EQUAL(part->size(), want);
        const image_dataset head = first_samples(*all, rows);
        BOOST_CHECK(head.images.shape() == part->images.shape());
        for (int64_t i = 0; i < want * 28 * 28; ++i) BOOST_REQUIRE_EQUAL(part->images.f32()[i], all->images.f32()[i]);
        for (int64_t i = 0; i < want; ++i) {
          BOOST_CHECK_EQUAL(part->labels[std::size_t(i)], all->labels[std::size_t(i)]);
          BOOST_CHECK_EQUAL(head.labels[std::size_t(i)], all->labels[std::size_t(i)]);
        }
      }
    }
    // The images file cut after 4 images: 3 rows still read; the whole set
    // is an error.
    std::vector<uint8_t> cut(px.begin(), px.begin() + 4 * 28 * 28);
    write_idx(d.path / ("train-images-idx3-ubyte" + ext), 0x803, {uint32_t(n), 28, 28}, cut, gz);
    auto three = load_fashion_mnist(d.path.string(), true, 3);
    BOOST_REQUIRE_MESSAGE(three.has_value(), three.error().to_string());
    BOOST_CHECK_EQUAL(three->size(), 3);
    BOOST_CHECK(!load_fashion_mnist(d.path.string(), true).has_value());
    BOOST_CHECK(!load_fashion_mnist(d.path.string(), true, 5).has_value());
  }
}

BOOST_AUTO_TEST_CASE(bad_files_name_the_file) {
  temp_dir d;
  auto missing = load_fashion_mnist(d.path.string(), false);
  BOOST_REQUIRE(!missing.has_value());
  BOOST_CHECK(missing.error().code() == errc::not_found);
  BOOST_CHECK(missing.error().message().find("t10k-images-idx3-ubyte") != std::string::npos);

  write_set(d.path, "t10k", 3, true, 12);  // label 12
  auto bad_label = load_fashion_mnist(d.path.string(), false);
  BOOST_REQUIRE(!bad_label.has_value());
  BOOST_CHECK(bad_label.error().code() == errc::parse_error);
  BOOST_CHECK(bad_label.error().message().find("t10k-labels") != std::string::npos);

  write_idx(d.path / "t10k-images-idx3-ubyte.gz", 0x803, {3, 4, 3}, std::vector<uint8_t>(10), true);  // short
  auto truncated = load_fashion_mnist(d.path.string(), false);
  BOOST_REQUIRE(!truncated.has_value());
  BOOST_CHECK(truncated.error().code() == errc::parse_error);

  write_idx(d.path / "t10k-images-idx3-ubyte.gz", 0x801, {3, 4, 3}, std::vector<uint8_t>(36), true);  // wrong magic
  auto magic = load_fashion_mnist(d.path.string(), false);
  BOOST_REQUIRE(!magic.has_value());
  BOOST_CHECK(magic.error().message().find("magic") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(fashion_mnist_when_installed) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    BOOST_TEST_MESSAGE("Fashion-MNIST not installed; skipping");
    return;
  }
  auto test = load_fashion_mnist(dir, false);
  BOOST_REQUIRE_MESSAGE(test.has_value(), test.error().to_string());
  BOOST_CHECK(test->images.shape() == (shape{10000, 1, 28, 28}));
  std::vector<int> counts(10);
  for (int32_t y : test->labels) counts[std::size_t(y)]++;
  for (int c : counts) BOOST_CHECK_EQUAL(c, 1000);  // the test split is balanced
}

BOOST_AUTO_TEST_CASE(synthetic_is_deterministic_and_shardable) {
  auto a = make_synthetic_images({2, 5, 5}, 20, 4, 9);
  auto b = make_synthetic_images({2, 5, 5}, 20, 4, 9);
  auto tail = make_synthetic_images({2, 5, 5}, 5, 4, 9, 1.0f, 15);
  BOOST_CHECK(a.images.shape() == (shape{20, 2, 5, 5}));
  BOOST_CHECK_EQUAL(max_abs_diff(a.images.view(), b.images.view()), 0.0f);
  BOOST_CHECK(a.labels == b.labels);
  BOOST_CHECK_EQUAL(max_abs_diff(a.images.view().slice_outer(15, 20), tail.images.view()), 0.0f);
  BOOST_CHECK(std::vector<int32_t>(a.labels.begin() + 15, a.labels.end()) == tail.labels);
  auto c = make_synthetic_images({2, 5, 5}, 20, 4, 10);
  BOOST_CHECK_GT(max_abs_diff(a.images.view(), c.images.view()), 0.0f);
  for (int32_t y : a.labels) BOOST_CHECK(y >= 0 && y < 4);
}

BOOST_AUTO_TEST_CASE(a_training_set_asks_for_huge_pages) {
  // 8 MiB of samples: its 2 MiB-aligned interior lies in a mapping the
  // kernel marks "hg" (MADV_HUGEPAGE) in /proc/self/smaps. A kernel without
  // transparent huge pages marks nothing: skipped.
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) return;
  auto d = make_synthetic_images({1, 32, 32}, 2048, 2, 3);
  const auto a = reinterpret_cast<uintptr_t>(d.images.f32());
  const uintptr_t inside = ((a + (uintptr_t{2} << 20) - 1) & ~((uintptr_t{2} << 20) - 1)) + 4096;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_it = false, advised = false, found = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line (keys end in ':')
      in_it = lo <= inside && inside < hi;
      found = found || in_it;
    } else if (in_it && line.rfind("VmFlags:", 0) == 0) {
      advised = line.find(" hg") != std::string::npos;
    }
  }
  BOOST_REQUIRE(found);
  BOOST_CHECK_MESSAGE(advised, "the training set's pages are not advised MADV_HUGEPAGE");
}

BOOST_AUTO_TEST_CASE(normalisation_gives_zero_mean_unit_std_per_channel) {
  auto d = make_synthetic_images({3, 4, 4}, 50, 3, 1);
  float* x = d.images.f32();
  for (int64_t i = 0; i < d.images.numel(); ++i) x[i] = x[i] * 2.0f + 5.0f;  // shift and scale
  auto st = channel_stats(d);
  BOOST_REQUIRE_EQUAL(st.mean.size(), 3u);
  normalize(d, st);
  auto after = channel_stats(d);
  for (int c = 0; c < 3; ++c) {
    BOOST_CHECK_SMALL(after.mean[std::size_t(c)], 1e-4f);
    BOOST_CHECK_CLOSE(after.stddev[std::size_t(c)], 1.0f, 1e-2);
  }
}
