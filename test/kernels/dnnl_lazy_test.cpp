// kernels/cpu/dnnl_lazy.cpp: hetflow links no libdnnl; the first oneDNN call
// loads it, and the calls then work as linked ones would.
#define BOOST_TEST_MODULE dnnl_lazy
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <dnnl.hpp>

BOOST_AUTO_TEST_CASE(onednn_is_loaded_at_its_first_call) {
  // Not loaded at start (nothing in this process linked it).
  BOOST_TEST(::dlopen("libdnnl.so.2", RTLD_NOW | RTLD_NOLOAD) == nullptr);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  void* h = ::dlopen("libdnnl.so.2", RTLD_NOW | RTLD_NOLOAD);
  BOOST_REQUIRE(h != nullptr);
  ::dlclose(h);  // (drops the reference NOLOAD took)
  // A primitive through the forwarded calls: a reorder of 4 floats from a
  // to ba layout (a 2 x 2 transpose; a cpu stream runs it at once).
  dnnl::memory::desc from({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  dnnl::memory::desc to({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ba);
  float in[4] = {1.0f, 2.0f, 3.0f, 4.0f}, out[4] = {};
  dnnl::memory src(from, eng, in), dst(to, eng, out);
  dnnl::reorder(src, dst).execute(s, src, dst);
  BOOST_TEST(out[0] == 1.0f);
  BOOST_TEST(out[1] == 3.0f);
  BOOST_TEST(out[2] == 2.0f);
  BOOST_TEST(out[3] == 4.0f);
  // Errors come back as before (an invalid dims desc).
  dnnl_memory_desc_t bad;
  dnnl_dims_t dims = {-1};
  BOOST_TEST(dnnl_memory_desc_init_by_tag(&bad, 1, dims, dnnl_f32, dnnl_a) != dnnl_success);
}
