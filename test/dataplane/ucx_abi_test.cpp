// The library actors/dataplane/ucx_lazy.cpp loads is the UCX its forwarders
// were compiled against: this test links libucp (the only hetflow binary
// that does) and checks its API version against the headers'. Linking it
// also lets tools that list a build's libraries with ldd (the GPU machine's
// bundle) find UCX and what it needs. And the data plane's own binaries do
// not load UCX until it starts (ucx_data_plane_test runs it).
#define BOOST_TEST_MODULE ucx_abi
#include <boost/test/unit_test.hpp>

#include <ucp/api/ucp.h>

BOOST_AUTO_TEST_CASE(the_library_matches_the_headers) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  BOOST_TEST(major == UCP_API_MAJOR);
  BOOST_TEST(minor >= UCP_API_MINOR);  // UCX keeps its API within a major version
}
