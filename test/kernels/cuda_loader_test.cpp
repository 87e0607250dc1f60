// The CUDA seam on any machine (label unit): asking for a cuda device gives
// either a working context or a clear errc::unsupported naming what is
// missing (module, driver, device), never a crash; a broken or foreign
// module is refused with a message naming it (HETFLOW_CUDA_LIBRARY, set by
// the extra CTest entries, with HETFLOW_TEST_EXPECT the text to find).
#define BOOST_TEST_MODULE kernels_cuda_loader
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_loader.hpp"
#include "kernels/model.hpp"
#include "kernels/trainer.hpp"
#include "kernels/zoo.hpp"

using namespace hetflow;
using namespace hetflow::kernels;

namespace {

bool has_device() { return !probe_cuda().devices.empty(); }

const char* expected_text() { return std::getenv("HETFLOW_TEST_EXPECT"); }

}  // namespace

BOOST_AUTO_TEST_CASE(device_context_for_cuda) {
  auto probe = probe_cuda();
  BOOST_TEST_MESSAGE("probe: library " << (probe.library_loaded ? "loaded" : "not loaded") << " from "
                                       << probe.library_path << "; " << probe.devices.size() << " devices; "
                                       << probe.why_none);
  auto ctx = make_device_context(device::cuda(0), 0);
  if (has_device()) {
    BOOST_REQUIRE_MESSAGE(ctx.has_value(), ctx.error().to_string());
    BOOST_CHECK((*ctx)->where() == device::cuda(0));
    BOOST_CHECK((*ctx)->memory() != nullptr);
    BOOST_CHECK((*ctx)->synchronize().ok());
    return;
  }
  BOOST_REQUIRE(!ctx.has_value());
  const status& e = ctx.error();
  BOOST_TEST_MESSAGE("cuda:0 -> " << e.to_string());
  BOOST_CHECK(e.code() == errc::unsupported);
  BOOST_CHECK(e.message().find("cuda:0") != std::string::npos);
  BOOST_CHECK(!probe.why_none.empty());
  if (const char* want = expected_text())
    BOOST_CHECK_MESSAGE(e.message().find(want) != std::string::npos, "want '" << want << "' in: " << e.message());
  else if (probe.library_loaded)
    // The module loaded: the reason is CUDA's own (no driver, no device).
    BOOST_CHECK_MESSAGE(e.message().find("no CUDA device is usable here") != std::string::npos, e.message());
}

BOOST_AUTO_TEST_CASE(device_beyond_the_last_is_refused) {
  auto ctx = make_device_context(device::cuda(97), 0);
  BOOST_REQUIRE(!ctx.has_value());
  BOOST_CHECK(ctx.error().code() == errc::unsupported);
  BOOST_CHECK(ctx.error().message().find("cuda:97") != std::string::npos);
  BOOST_TEST_MESSAGE(ctx.error().to_string());
}

BOOST_AUTO_TEST_CASE(model_and_trainer_say_why) {
  if (has_device()) return;  // cuda_training_test covers this with a device
  auto spec = make_model_spec("lenet5");
  BOOST_REQUIRE(spec.has_value());
  auto m = build_model(*spec, device::cuda(0));
  BOOST_REQUIRE(!m.has_value());
  BOOST_CHECK(m.error().code() == errc::unsupported);
  BOOST_CHECK(m.error().message().find("cuda:0") != std::string::npos);
  train_config c;
  c.model = "mlp";
  c.data.kind = dataset_kind::synthetic;
  c.data.train_size = 64;
  c.data.test_size = 16;
  c.epochs = 1;
  c.where = device::cuda(0);
  auto r = train_single(c);
  BOOST_REQUIRE(!r.has_value());
  BOOST_CHECK(r.error().code() == errc::unsupported);
  BOOST_TEST_MESSAGE("train_single on cuda:0 -> " << r.error().to_string());
}

BOOST_AUTO_TEST_CASE(backend_interface_is_version_checked) {
  auto be = load_cuda_backend();
  if (!be.has_value()) {
    BOOST_CHECK(be.error().code() == errc::unsupported);
    BOOST_CHECK(!be.error().message().empty());
    BOOST_TEST_MESSAGE("backend: " << be.error().to_string());
    return;
  }
  // Loaded: the module accepted our stamp; it must refuse another one.
  const cuda::abi_stamp mine = cuda::current_abi();
  BOOST_CHECK_EQUAL(mine.version, cuda::api_version);
  std::string why;
  int n = (*be)->device_count(why);
  BOOST_TEST_MESSAGE("devices: " << n << " (" << why << "); " << (*be)->versions());
  BOOST_CHECK(n > 0 || !why.empty());
}
