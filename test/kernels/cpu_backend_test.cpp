// The cpu backend's plumbing: oneDNN error conversion, contexts, layout
// staging, oneTBB loops.
#define BOOST_TEST_MODULE kernels_cpu_backend
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <vector>

#include "kernels/cpu/cpu_context.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/tensor.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
using namespace hetflow::kernels::cpu;

namespace {

status make_bad_conv(const cpu_context& ctx) {
  // Output channels of the weights (4) disagree with the destination (5).
  auto src = plain_md({1, 2, 5, 5}), w = plain_md({4, 2, 3, 3}), dst = plain_md({1, 5, 3, 3});
  HF_DNNL_TRY(dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src,
                                      w, dst, {1, 1}, {0, 0}, {0, 0}),
      ctx.engine()));
  return {};
}

status c_api_failure() {
  HF_DNNL_CHECK(dnnl_primitive_execute(nullptr, nullptr, 0, nullptr));
  return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(onednn_errors_name_the_call) {
  cpu_context ctx(1);
  status st = make_bad_conv(ctx);
  BOOST_REQUIRE(!st.ok());
  BOOST_CHECK(st.code() == errc::device_error || st.code() == errc::unsupported);
  BOOST_CHECK(st.message().find("convolution_forward::primitive_desc") != std::string::npos);
  BOOST_TEST_MESSAGE(st.to_string());
  status c = c_api_failure();
  BOOST_CHECK(c.code() == errc::device_error);
  BOOST_CHECK(c.message().find("dnnl_primitive_execute") != std::string::npos);
  BOOST_CHECK(c.message().find("invalid_arguments") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(context_threads) {
  cpu_context one(1), two(2), all(0);
  BOOST_CHECK_EQUAL(one.threads(), 1);
  BOOST_CHECK_EQUAL(two.threads(), 2);
  BOOST_CHECK_GE(all.threads(), 1);
  int seen = 0;
  two.run([&] { seen = tbb::this_task_arena::max_concurrency(); });
  BOOST_CHECK_EQUAL(seen, 2);
  BOOST_CHECK(!cpu_context::isa_name().empty());
}

BOOST_AUTO_TEST_CASE(staged_memory_round_trips_through_blocked_layouts) {
  cpu_context ctx(1);
  shape s{2, 20, 3, 3};
  tensor a = tensor::empty(s), b = tensor::zeros(s);
  for (int64_t i = 0; i < a.numel(); ++i) a.f32()[i] = float(i);
  staged_memory m;
  dnnl::memory::desc blocked(to_dims(s), dt::f32, tag::aBcd16b);  // channels padded 20 -> 32
  m.init(ctx, plain_md(s), blocked);
  BOOST_CHECK(m.staged());
  BOOST_CHECK_EQUAL(m.inner_bytes(), 2u * 32 * 3 * 3 * 4);
  m.attach(a.bytes());
  BOOST_REQUIRE(m.to_inner(ctx, "test", "in").ok());
  m.attach(b.bytes());
  BOOST_REQUIRE(m.to_plain(ctx, "test", "out").ok());
  BOOST_CHECK_EQUAL(max_abs_diff(a.view(), b.view()), 0.0f);
  staged_memory same;
  same.init(ctx, plain_md(s), plain_md(s));
  BOOST_CHECK(!same.staged());
  BOOST_CHECK(same.to_inner(ctx, "noop", "in").ok());
}

BOOST_AUTO_TEST_CASE(parallel_range_covers_every_index_once) {
  cpu_context ctx(2);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{300000}}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    ctx.run([&] {
      parallel_range(n, 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[std::size_t(i)]++;
      });
    });
    for (auto& h : hits) BOOST_REQUIRE_EQUAL(h.load(), 1);
  }
}
