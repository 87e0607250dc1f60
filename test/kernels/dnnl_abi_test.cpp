// The library kernels/cpu/dnnl_lazy.cpp loads is the oneDNN its forwarders
// were compiled against: this test links libdnnl (the only hetflow binary
// that does) and checks its version against the headers' (2.x: the C API
// dnnl_lazy.cpp forwards). Linking it also lets tools that list a build's
// libraries with ldd (the GPU machine's bundle, the Docker image's
// packages) find the library and what it needs.
#define BOOST_TEST_MODULE dnnl_abi
#include <boost/test/unit_test.hpp>

#include <dnnl.h>

BOOST_AUTO_TEST_CASE(the_library_matches_the_headers) {
  const dnnl_version_t* v = dnnl_version();
  BOOST_REQUIRE(v != nullptr);
  BOOST_TEST(v->major == DNNL_VERSION_MAJOR);
  BOOST_TEST(v->minor == DNNL_VERSION_MINOR);
  BOOST_TEST(DNNL_VERSION_MAJOR == 2);
}
