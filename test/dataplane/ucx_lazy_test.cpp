// actors/dataplane/ucx_lazy.cpp: the data plane's binaries link no libucp;
// UCX is loaded when the UCX data plane first calls it, and works.
#define BOOST_TEST_MODULE ucx_lazy
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <string>

#include <ucp/api/ucp.h>

BOOST_AUTO_TEST_CASE(ucx_is_loaded_at_its_first_call) {
  BOOST_TEST(::dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD) == nullptr);
  ucp_config_t* config = nullptr;
  BOOST_REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
  void* h = ::dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD);
  BOOST_REQUIRE(h != nullptr);
  ::dlclose(h);
  BOOST_TEST(std::string(ucs_status_string(UCS_ERR_NO_MEMORY)) == "Out of memory");
  ucp_config_release(config);
}
