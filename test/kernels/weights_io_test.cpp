// Weights files: round trips through schemas' wire message, and errors.
#define BOOST_TEST_MODULE kernels_weights_io
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/random.hpp"
#include "kernels/weights_io.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::kernels;
namespace fs = std::filesystem;

namespace {

model build(const std::string& name, zoo_options o, uint64_t seed) {
  auto spec = make_model_spec(name, o);
  BOOST_REQUIRE(spec.has_value());
  auto m = build_model(*spec, device::cpu(), {1, seed});
  BOOST_REQUIRE_MESSAGE(m.has_value(), m.error().to_string());
  return std::move(*m);
}

tensor outputs(model& m, uint64_t seed) {
  shape s{3};
  for (int64_t d : m.spec().input.dims()) s.push_back(d);
  tensor x = tensor::empty(s);
  rng r(seed);
  for (float& v : x.f32_span()) v = r.normal();
  tensor out;
  m.context().run([&] {
    auto y = m.forward(x.view(), mode::eval);
    BOOST_REQUIRE(y.has_value());
    out = tensor::from(*y);
  });
  return out;
}

struct temp_file {
  std::string path = (fs::temp_directory_path() / ("hetflow_weights_" + std::to_string(::getpid()) + ".hfw")).string();
  ~temp_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_restores_outputs) {
  temp_file f;
  model a = build("lenet5", {}, 1);
  model b = build("lenet5", {}, 2);  // other initial weights
  BOOST_CHECK_GT(max_abs_diff(outputs(a, 5).view(), outputs(b, 5).view()), 0.0f);
  BOOST_REQUIRE(save_weights(a, f.path).ok());
  uint64_t v0 = b.parameters()[0]->version;
  auto st = load_weights(b, f.path);
  BOOST_REQUIRE_MESSAGE(st.ok(), st.to_string());
  BOOST_CHECK_EQUAL(max_abs_diff(outputs(a, 5).view(), outputs(b, 5).view()), 0.0f);
  BOOST_CHECK_GT(b.parameters()[0]->version, v0);  // cached reorders get refreshed
  BOOST_CHECK(!fs::exists(f.path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_travel_too) {
  zoo_options o;
  o.input = shape{3, 16, 16};
  o.width = 0.0625;
  model a = build("resnet18", o, 1);
  for (state_tensor* s : a.state())
    for (float& v : s->value.f32_span()) v += 0.5f;  // non-default running stats
  auto buf = encode_weights(a);
  BOOST_REQUIRE(buf.has_value());
  model b = build("resnet18", o, 9);
  auto ref = std::make_shared<const wire_buffer>(std::move(*buf));
  BOOST_REQUIRE(decode_weights(b, ref, "memory").ok());
  auto sa = a.state(), sb = b.state();
  BOOST_REQUIRE_EQUAL(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) BOOST_CHECK_EQUAL(max_abs_diff(sa[i]->value, sb[i]->value), 0.0f);
  BOOST_CHECK_EQUAL(max_abs_diff(outputs(a, 3).view(), outputs(b, 3).view()), 0.0f);
}

BOOST_AUTO_TEST_CASE(mismatches_are_errors_and_change_nothing) {
  temp_file f;
  model lenet = build("lenet5", {}, 1);
  BOOST_REQUIRE(save_weights(lenet, f.path).ok());
  model mlp = build("mlp", {}, 1);
  auto wrong_model = load_weights(mlp, f.path);
  BOOST_CHECK(wrong_model.code() == errc::invalid_argument);
  BOOST_CHECK(wrong_model.message().find("lenet5") != std::string::npos);

  zoo_options wide;
  wide.width = 2.0;
  model wide_lenet = build("lenet5", wide, 1);
  tensor before = outputs(wide_lenet, 1);
  auto wrong_shape = load_weights(wide_lenet, f.path);
  BOOST_CHECK(wrong_shape.code() == errc::invalid_argument);
  BOOST_CHECK(wrong_shape.message().find("conv1.weight") != std::string::npos);
  BOOST_CHECK_EQUAL(max_abs_diff(before.view(), outputs(wide_lenet, 1).view()), 0.0f);

  auto missing = load_weights(lenet, f.path + ".nope");
  BOOST_CHECK(missing.code() == errc::not_found);
}

BOOST_AUTO_TEST_CASE(corrupt_files_are_rejected) {
  temp_file f;
  model m = build("lenet5", {}, 1);
  BOOST_REQUIRE(save_weights(m, f.path).ok());
  auto size = fs::file_size(f.path);
  fs::resize_file(f.path, size / 2);  // truncated
  auto st = load_weights(m, f.path);
  BOOST_CHECK(!st.ok());
  BOOST_CHECK(st.message().find(f.path) != std::string::npos);
  std::ofstream(f.path, std::ios::binary | std::ios::trunc) << "not a weights file at all, definitely";
  BOOST_CHECK(!load_weights(m, f.path).ok());
}
