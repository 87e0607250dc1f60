// kernels/preprocess/image_transforms.hpp: crop with zero padding, flip and
// normalisation on small hand-made images; determinism of the augmentation
// whatever the split and thread count. Also the pieces of kernels/trainer.hpp
// that streamed input relies on: epoch_plan, epoch_order, sample_ledger.
#define BOOST_TEST_MODULE kernels_image_transforms
#include <boost/test/unit_test.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "kernels/dataset.hpp"
#include "kernels/preprocess/image_transforms.hpp"
#include "kernels/trainer.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
namespace pp = hetflow::kernels::preprocess;

namespace {

// 2 channels of 3x3: channel c holds 10 * c + (1..9) row-major.
std::vector<float> two_channel_3x3() {
  std::vector<float> v(18);
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 9; ++i) v[std::size_t(c * 9 + i)] = float(10 * c + i + 1);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(image_transforms)

BOOST_AUTO_TEST_CASE(crop_at_the_centre_is_the_identity) {
  pp::image_shape s{2, 3, 3};
  auto in = two_channel_3x3();
  std::vector<float> out(in.size(), -1.0f);
  for (int p : {1, 2, 4}) {
    pp::crop_with_padding(in.data(), out.data(), s, p, p, p);
    BOOST_TEST(out == in, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(crop_shifts_and_pads_with_zeros) {
  pp::image_shape s{2, 3, 3};
  auto in = two_channel_3x3();
  std::vector<float> out(in.size(), -1.0f);
  // Window at the padded image's top-left corner: the image moves down-right
  // by one, a zero row on top and a zero column on the left.
  pp::crop_with_padding(in.data(), out.data(), s, 1, 0, 0);
  std::vector<float> want{0, 0, 0, 0, 1, 2, 0, 4, 5,  //
                          0, 0, 0, 0, 11, 12, 0, 14, 15};
  BOOST_TEST(out == want, boost::test_tools::per_element());
  // Bottom-right corner: up-left by one.
  pp::crop_with_padding(in.data(), out.data(), s, 1, 2, 2);
  want = {5, 6, 0, 8, 9, 0, 0, 0, 0,  //
          15, 16, 0, 18, 19, 0, 0, 0, 0};
  BOOST_TEST(out == want, boost::test_tools::per_element());
  // Only vertical: up by one (dy = 2, dx = p).
  pp::crop_with_padding(in.data(), out.data(), s, 1, 2, 1);
  want = {4, 5, 6, 7, 8, 9, 0, 0, 0,  //
          14, 15, 16, 17, 18, 19, 0, 0, 0};
  BOOST_TEST(out == want, boost::test_tools::per_element());
  // Padding wider than the image: a corner window sees nothing of it.
  pp::crop_with_padding(in.data(), out.data(), s, 4, 0, 8);
  BOOST_TEST(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
}

BOOST_AUTO_TEST_CASE(flip_mirrors_rows) {
  pp::image_shape s{1, 2, 3};
  std::vector<float> img{1, 2, 3, 4, 5, 6};
  pp::flip_horizontal(img.data(), s);
  std::vector<float> want{3, 2, 1, 6, 5, 4};
  BOOST_TEST(img == want, boost::test_tools::per_element());
  pp::flip_horizontal(img.data(), s);
  want = {1, 2, 3, 4, 5, 6};
  BOOST_TEST(img == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(normalisation_is_per_channel) {
  pp::image_shape s{2, 1, 2};
  std::vector<float> img{1, 3, 10, 30};
  pp::channel_normalization n{{2.0f, 20.0f}, {0.5f, 10.0f}};
  pp::normalize_image(img.data(), s, n);
  std::vector<float> want{-2, 2, -1, 1};
  BOOST_TEST(img == want, boost::test_tools::per_element());
  // Empty statistics: untouched.
  pp::normalize_image(img.data(), s, {});
  BOOST_TEST(img == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(transform_crops_then_flips_then_normalises) {
  pp::image_shape s{1, 3, 3};
  std::vector<float> in{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> out(9);
  pp::augment_options opt{1, true};
  pp::channel_normalization n{{1.0f}, {2.0f}};
  pp::transform_image(in.data(), out.data(), s, opt, pp::augment_draw{0, 0, true}, n);
  // crop (0, 0): {0 0 0, 0 1 2, 0 4 5}; flip: {0 0 0, 2 1 0, 5 4 0}; (x - 1) / 2.
  std::vector<float> want{-0.5f, -0.5f, -0.5f, 0.5f, 0.0f, -0.5f, 2.0f, 1.5f, -0.5f};
  BOOST_TEST(out == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(draws_are_deterministic_and_in_range) {
  pp::augment_options opt{2, true};
  int flips = 0, moved = 0, differs_by_epoch = 0;
  std::set<int> dys;
  for (int64_t i = 0; i < 2000; ++i) {
    auto a = pp::draw_augmentation(opt, 7, 3, i);
    auto b = pp::draw_augmentation(opt, 7, 3, i);
    BOOST_TEST_REQUIRE((a.dy == b.dy && a.dx == b.dx && a.flip == b.flip));
    BOOST_TEST_REQUIRE((a.dy >= 0 && a.dy <= 4 && a.dx >= 0 && a.dx <= 4));
    dys.insert(a.dy);
    flips += a.flip;
    moved += (a.dy != 2 || a.dx != 2);
    auto c = pp::draw_augmentation(opt, 7, 4, i);
    differs_by_epoch += (c.dy != a.dy || c.dx != a.dx || c.flip != a.flip);
  }
  BOOST_TEST(dys.size() == 5u);  // every offset happens
  BOOST_TEST(flips > 850);
  BOOST_TEST(flips < 1150);
  BOOST_TEST(moved > 1800);  // 24/25 of the windows are not the identity
  BOOST_TEST(differs_by_epoch > 1800);
  // Disabled: the identity.
  auto d = pp::draw_augmentation(pp::augment_options{}, 7, 3, 5);
  BOOST_TEST((d.dy == 0 && d.dx == 0 && !d.flip));
  auto f = pp::draw_augmentation(pp::augment_options{0, true}, 7, 3, 5);
  BOOST_TEST((f.dy == 0 && f.dx == 0));
}

// Same seed, epoch and sample => same output, however the samples are split
// into batches (shards) and however many threads run them.
BOOST_AUTO_TEST_CASE(batches_do_not_depend_on_split_or_threads) {
  image_dataset d = make_synthetic_images(shape{3, 8, 8}, 200, 4, 11);
  pp::image_shape s{3, 8, 8};
  const int64_t per = s.numel();
  pp::augment_options opt{2, true};
  normalization st = channel_stats(d);
  pp::channel_normalization n{st.mean, st.stddev};
  std::vector<int64_t> ids(200);
  std::iota(ids.begin(), ids.end(), int64_t{0});
  std::reverse(ids.begin(), ids.end());
  std::vector<float> whole(ids.size() * std::size_t(per));
  pp::transform_batch(d.images.view().f32_span(), s, ids, whole, opt, n, 5, 2);
  // Three "shards" of uneven sizes, each on one thread.
  std::vector<float> parts(whole.size());
  tbb::task_arena one(1);
  one.execute([&] {
    std::size_t at = 0;
    for (std::size_t len : {std::size_t(13), std::size_t(120), std::size_t(67)}) {
      pp::transform_batch(d.images.view().f32_span(), s, std::span<const int64_t>(ids).subspan(at, len),
                          std::span<float>(parts).subspan(at * std::size_t(per), len * std::size_t(per)), opt, n, 5,
                          2);
      at += len;
    }
  });
  BOOST_TEST(parts == whole);
  // Another epoch gives other images (different draws), the same epoch again the same.
  std::vector<float> other(whole.size());
  pp::transform_batch(d.images.view().f32_span(), s, ids, other, opt, n, 5, 3);
  BOOST_TEST(other != whole);
  pp::transform_batch(d.images.view().f32_span(), s, ids, other, opt, n, 5, 2);
  BOOST_TEST(other == whole);
}

// 8-bit pixels (the stream shard's compact copy of a byte-valued dataset)
// give the float path's batches bit for bit, raw and scaled to [0, 1] as
// the Fashion-MNIST loader scales them; byte_scale says when they can.
BOOST_AUTO_TEST_CASE(byte_pixels_equal_the_float_path) {
  pp::image_shape s{2, 6, 5};
  const int64_t per = s.numel(), n = 40;
  pp::channel_normalization norm{{0.28f, 0.51f}, {0.16f, 0.29f}};
  std::vector<int64_t> ids{3, 39, 0, 17, 17, 22};
  for (float scale : {1.0f, 1.0f / 255.0f}) {
    std::vector<float> f(std::size_t(n * per));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(uint8_t((i * 37 + 11) % 256)) * scale;
    BOOST_TEST(pp::byte_scale(f) == scale);
    auto b = pp::to_bytes(f, scale);
    for (pp::augment_options opt : {pp::augment_options{}, pp::augment_options{2, true}}) {
      std::vector<float> a(ids.size() * std::size_t(per)), c(a.size());
      pp::transform_batch(std::span<const float>(f), s, ids, a, opt, norm, 9, 1);
      pp::transform_batch(std::span<const uint8_t>(b), scale, s, ids, c, opt, norm, 9, 1);
      BOOST_TEST(a == c);
    }
    f[5] = 3.5f * scale;
    BOOST_TEST(pp::byte_scale(f) == 0.0f);
    f[5] = -1.0f * scale;
    BOOST_TEST(pp::byte_scale(f) == 0.0f);
  }
}

// Without augmentation a batch is exactly the in-memory path's normalised rows.
BOOST_AUTO_TEST_CASE(unaugmented_equals_in_memory_normalisation) {
  image_dataset raw = make_synthetic_images(shape{2, 5, 4}, 50, 3, 9);
  image_dataset mem = make_synthetic_images(shape{2, 5, 4}, 50, 3, 9);
  normalization st = channel_stats(raw);
  normalize(mem, st);
  pp::image_shape s{2, 5, 4};
  std::vector<int64_t> ids{49, 0, 17, 3};
  std::vector<float> out(ids.size() * std::size_t(s.numel()));
  pp::transform_batch(raw.images.view().f32_span(), s, ids, out, pp::augment_options{},
                      pp::channel_normalization{st.mean, st.stddev}, 1, 0);
  for (std::size_t j = 0; j < ids.size(); ++j)
    for (int64_t k = 0; k < s.numel(); ++k)
      BOOST_TEST_REQUIRE(out[j * std::size_t(s.numel()) + std::size_t(k)] ==
                         mem.images.f32()[ids[j] * s.numel() + k]);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(stream_books)

BOOST_AUTO_TEST_CASE(epoch_plan_batches) {
  auto p = make_epoch_plan(100, 32, false, 0);
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->steps == 4);
  BOOST_TEST(p->used_rows() == 100);
  BOOST_TEST(p->batch_begin(3) == 96);
  BOOST_TEST(p->batch_rows(3) == 4);
  BOOST_TEST(make_epoch_plan(100, 32, true, 0)->steps == 3);
  auto cut = make_epoch_plan(100, 32, false, 2);
  BOOST_TEST(cut->steps == 2);
  BOOST_TEST(cut->used_rows() == 64);
  BOOST_TEST(cut->batch_rows(1) == 32);
  BOOST_TEST(!make_epoch_plan(10, 32, true, 0).has_value());
  BOOST_TEST(!make_epoch_plan(0, 32, false, 0).has_value());
}

BOOST_AUTO_TEST_CASE(epoch_orders_are_permutations_replayed_from_the_seed) {
  epoch_order a(1000, 42), b(1000, 42), c(1000, 43);
  std::vector<int64_t> prev;
  for (int e = 0; e < 3; ++e) {
    a.next_epoch();
    b.next_epoch();
    c.next_epoch();
    BOOST_TEST(a.epoch() == e);
    std::vector<int64_t> o(a.order().begin(), a.order().end());
    BOOST_TEST(std::equal(o.begin(), o.end(), b.order().begin(), b.order().end()));
    BOOST_TEST(!std::equal(o.begin(), o.end(), c.order().begin(), c.order().end()));
    BOOST_TEST(o != prev);
    std::vector<int64_t> sorted = o;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 1000; ++i) BOOST_TEST_REQUIRE(sorted[std::size_t(i)] == i);
    prev = o;
  }
}

BOOST_AUTO_TEST_CASE(ledger_accepts_exactly_once_and_names_what_breaks_it) {
  sample_ledger l(6);
  l.begin_epoch(0, 6);
  std::vector<int64_t> a{4, 0, 2}, b{1, 5, 3};
  BOOST_TEST(l.add(a, "shard a").ok());
  BOOST_TEST(!l.end_epoch().ok());  // 3 of 6 so far
  BOOST_TEST(l.add(b, "shard b").ok());
  BOOST_TEST(l.end_epoch().ok());
  BOOST_TEST(l.count() == 6);
  std::vector<int64_t> all{0, 1, 2, 3, 4, 5};
  BOOST_TEST(l.checksum() == sample_ledger::checksum_of(all));
  // Next epoch: a repeat is named, with the sender.
  l.begin_epoch(1, 6);
  BOOST_TEST(l.add(a, "shard a").ok());
  std::vector<int64_t> dup{3, 0};
  auto s = l.add(dup, "shard b");
  BOOST_TEST(!s.ok());
  BOOST_TEST(s.message().find("sample 0 came twice in epoch 2") != std::string::npos);
  BOOST_TEST(s.message().find("shard b") != std::string::npos);
  // Out of range.
  l.begin_epoch(2, 6);
  std::vector<int64_t> bad{6};
  BOOST_TEST(!l.add(bad, "shard c").ok());
  // A lost row: 5 of 6 at the end.
  l.begin_epoch(3, 6);
  std::vector<int64_t> five{0, 1, 2, 3, 4};
  BOOST_TEST(l.add(five, "x").ok());
  auto e = l.end_epoch();
  BOOST_TEST(!e.ok());
  BOOST_TEST(e.message().find("used 5 distinct samples, expected 6") != std::string::npos);
  // Order does not change the checksum; another set does.
  std::vector<int64_t> shuffled{5, 3, 1, 0, 2, 4}, other{0, 1, 2, 3, 4, 4};
  BOOST_TEST(sample_ledger::checksum_of(shuffled) == sample_ledger::checksum_of(all));
  BOOST_TEST(sample_ledger::checksum_of(other) != sample_ledger::checksum_of(all));
}

// The stream shards' split (step % shards) with the plan and order covers
// every row of every epoch exactly once, for any number of shards.
BOOST_AUTO_TEST_CASE(round_robin_steps_cover_each_epoch_once) {
  const int64_t rows = 1003;
  auto plan = *make_epoch_plan(rows, 64, false, 0);
  for (int shards : {1, 2, 3, 7, 20}) {
    epoch_order order(rows, 5);
    sample_ledger ledger(rows);
    for (int e = 0; e < 2; ++e) {
      order.next_epoch();
      ledger.begin_epoch(e, plan.used_rows());
      for (int k = 0; k < shards; ++k)
        for (int64_t step = k; step < plan.steps; step += shards)
          BOOST_TEST_REQUIRE(ledger
                                 .add(order.order().subspan(std::size_t(plan.batch_begin(step)),
                                                            std::size_t(plan.batch_rows(step))),
                                      "shard")
                                 .ok());
      BOOST_TEST(ledger.end_epoch().ok());
    }
  }
}

// The in-memory source serves the plan's rows in the epoch's order.
BOOST_AUTO_TEST_CASE(memory_source_follows_plan_and_order) {
  image_dataset d = make_synthetic_images(shape{1, 2, 2}, 70, 3, 1);
  train_config c;
  c.batch_size = 32;
  c.seed = 9;
  auto src = make_memory_source(d, c);
  BOOST_TEST_REQUIRE(src.has_value());
  BOOST_TEST((*src)->plan().steps == 3);
  epoch_order order(70, 9);
  for (int e = 0; e < 2; ++e) {
    order.next_epoch();
    BOOST_TEST((*src)->begin_epoch(e).ok());
    for (int64_t s = 0; s < 3; ++s) {
      auto b = (*src)->next(e, s);
      BOOST_TEST_REQUIRE(b.has_value());
      BOOST_TEST(int64_t(b->labels.size()) == (s < 2 ? 32 : 6));
      for (std::size_t j = 0; j < b->labels.size(); ++j) {
        int64_t id = order.order()[std::size_t(s * 32) + j];
        BOOST_TEST_REQUIRE(b->labels[j] == d.labels[std::size_t(id)]);
        BOOST_TEST_REQUIRE(b->images.f32()[j * 4] == d.images.f32()[id * 4]);
      }
    }
    BOOST_TEST((*src)->end_epoch(e).ok());
  }
}

BOOST_AUTO_TEST_SUITE_END()
