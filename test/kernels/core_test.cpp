// shape, tensor, tensor views, device, random: the value types of kernels/.
#define BOOST_TEST_MODULE kernels_core
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "kernels/cpu/thread_slice.hpp"
#include "kernels/device.hpp"
#include "kernels/random.hpp"
#include "kernels/tensor.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

BOOST_AUTO_TEST_CASE(shape_basics) {
  shape s{2, 3, 4};
  BOOST_CHECK_EQUAL(s.rank(), 3);
  BOOST_CHECK_EQUAL(s.numel(), 24);
  BOOST_CHECK_EQUAL(s.inner_numel(), 12);
  BOOST_CHECK(s.with_outer(5) == (shape{5, 3, 4}));
  BOOST_CHECK_EQUAL(s.to_string(), "[2, 3, 4]");
  BOOST_CHECK_EQUAL(shape{}.numel(), 1);  // scalar
  BOOST_CHECK(!(shape{2, -1}.valid()));
  BOOST_CHECK(!(shape{2, 3} == shape{3, 2}));
}

BOOST_AUTO_TEST_CASE(tensor_storage_is_aligned_and_reused) {
  tensor t = tensor::zeros({3, 5});
  BOOST_CHECK_EQUAL(reinterpret_cast<uintptr_t>(t.f32()) % tensor::alignment, 0u);
  for (float v : t.f32_span()) BOOST_CHECK_EQUAL(v, 0.0f);
  const float* before = t.f32();
  t.resize({5, 3});  // same size: same storage
  BOOST_CHECK_EQUAL(t.f32(), before);
  t.resize({2, 2});  // smaller: same storage
  BOOST_CHECK_EQUAL(t.f32(), before);
  t.resize({100, 100});  // larger: new storage
  BOOST_CHECK_EQUAL(t.numel(), 10000);
  BOOST_CHECK_EQUAL(reinterpret_cast<uintptr_t>(t.f32()) % tensor::alignment, 0u);
}

BOOST_AUTO_TEST_CASE(clone_is_deep_and_views_borrow) {
  tensor a = tensor::filled({4, 2}, 1.5f);
  tensor b = a.clone();
  b.f32()[0] = 7.0f;
  BOOST_CHECK_EQUAL(a.f32()[0], 1.5f);
  tensor_view v = a.view();
  BOOST_CHECK_EQUAL(v.f32(), a.f32());
  tensor_view rows = v.slice_outer(1, 3);
  BOOST_CHECK(rows.shape() == (shape{2, 2}));
  BOOST_CHECK_EQUAL(rows.f32(), a.f32() + 2);
  BOOST_CHECK(v.reshaped({8}).shape() == (shape{8}));
  mutable_tensor_view mv = a.mutable_view().slice_outer(3, 4);
  mv.f32()[1] = -1.0f;
  BOOST_CHECK_EQUAL(a.f32()[7], -1.0f);
  tensor_ref shared = share(std::move(b));
  BOOST_CHECK_EQUAL(shared->f32()[0], 7.0f);
}

BOOST_AUTO_TEST_CASE(copy_into_checks_sizes) {
  tensor a = tensor::filled({2, 3}, 2.0f);
  tensor b = tensor::zeros({3, 2});
  BOOST_CHECK(copy_into(a.view(), b.mutable_view()).ok());
  BOOST_CHECK_EQUAL(max_abs_diff(a.view(), b.view()), 0.0f);
  tensor c = tensor::zeros({5});
  auto st = copy_into(a.view(), c.mutable_view());
  BOOST_CHECK(st.code() == errc::invalid_argument);
  tensor i = tensor::zeros({6}, dtype::i32);
  BOOST_CHECK(copy_into(a.view(), i.mutable_view()).code() == errc::invalid_argument);
}

BOOST_AUTO_TEST_CASE(typed_tensors) {
  tensor t = tensor::zeros({4}, dtype::i64);
  t.data<int64_t>()[3] = 42;
  BOOST_CHECK_EQUAL(t.byte_size(), 32u);
  BOOST_CHECK_EQUAL(t.view().data<int64_t>()[3], 42);
}

BOOST_AUTO_TEST_CASE(device_names) {
  BOOST_CHECK_EQUAL(device::cpu().to_string(), "cpu");
  BOOST_CHECK_EQUAL(device::cuda(2).to_string(), "cuda:2");
  BOOST_CHECK(parse_device("cuda:3") == device::cuda(3));
  BOOST_CHECK(parse_device("cuda") == device::cuda(0));
  BOOST_CHECK(parse_device("cpu") == device::cpu());
  BOOST_CHECK(!parse_device("gpu").has_value());
  BOOST_CHECK(!parse_device("cuda:-1").has_value());
  BOOST_CHECK(!parse_device("cuda:1x").has_value());
}

BOOST_AUTO_TEST_CASE(random_is_deterministic_and_spread) {
  rng a(123), b(123), c(124);
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next();
    BOOST_CHECK_EQUAL(x, b.next());
    seen.insert(x);
  }
  BOOST_CHECK_EQUAL(seen.size(), 100u);
  BOOST_CHECK_NE(rng(123).next(), c.next());
  // Pinned values: a change here changes every initial weight of every model.
  BOOST_CHECK_EQUAL(splitmix64(0), 0xe220a8397b1dcdafull);
  double sum = 0, sq = 0;
  rng n(5);
  for (int i = 0; i < 20000; ++i) {
    float u = n.uniform();
    BOOST_REQUIRE(u >= 0.0f && u < 1.0f);
    float z = n.normal();
    sum += z;
    sq += double(z) * z;
  }
  BOOST_CHECK_SMALL(sum / 20000, 0.05);
  BOOST_CHECK_CLOSE(sq / 20000, 1.0, 5.0);
}

// The slice set on a thread is what the kernel reports for it and for the
// threads it starts afterwards (the node sets it once, before its threads
// start). Kernels before 6.12 report no slice (0): then only the call's
// success is checked. Read on a thread of its own, checked here.
BOOST_AUTO_TEST_CASE(thread_slice_is_set_and_inherited) {
  const uint32_t before = cpu::thread_slice_us();
  std::string set_error, reset_error;
  uint32_t after_set = 0, in_child = 0, after_reset = 0;
  std::thread([&] {
    set_error = cpu::set_thread_slice_us(250);
    after_set = cpu::thread_slice_us();
    std::thread([&in_child] { in_child = cpu::thread_slice_us(); }).join();
    reset_error = cpu::set_thread_slice_us(0);
    after_reset = cpu::thread_slice_us();
  }).join();
  BOOST_TEST(set_error == "");
  BOOST_TEST(reset_error == "");
  if (before != 0) {
    BOOST_TEST(after_set == 250u);
    BOOST_TEST(in_child == 250u);
    BOOST_TEST(after_reset == before);
  }
  BOOST_TEST(cpu::thread_slice_us() == before);  // the test's own thread is untouched
}
