#define BOOST_TEST_MODULE cluster_auth
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <fstream>

#include "test/scratch_dir.hpp"
#include "actors/cluster_auth.hpp"

using namespace hetflow;
using namespace hetflow::actors;
namespace fs = std::filesystem;

namespace {

std::string hex(const std::vector<char>& v) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : v) {
    auto b = static_cast<unsigned char>(c);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

const fs::path& scratch_root() { return hetflow::test::scratch_root("hetflow-auth-test"); }

fs::path scratch(const std::string& name) {
  fs::path dir = scratch_root();
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hmac_matches_rfc4231) {
  // RFC 4231, test cases 1 and 2.
  BOOST_TEST(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  BOOST_TEST(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

BOOST_AUTO_TEST_CASE(mac_binds_every_part_and_its_boundaries) {
  const std::string key = "0123456789abcdef0123";
  auto m = auth_mac(key, "hetflow-hello", {"demo", "42", "n1"});
  BOOST_TEST(m.size() == 32u);
  BOOST_TEST(mac_equal(m, auth_mac(key, "hetflow-hello", {"demo", "42", "n1"})));
  BOOST_TEST(!mac_equal(m, auth_mac(key, "hetflow-welcome", {"demo", "42", "n1"})));  // label
  BOOST_TEST(!mac_equal(m, auth_mac(key, "hetflow-hello", {"demo", "42", "n2"})));     // a part
  BOOST_TEST(!mac_equal(m, auth_mac(key, "hetflow-hello", {"demo4", "2", "n1"})));     // boundaries
  BOOST_TEST(!mac_equal(m, auth_mac(key + "x", "hetflow-hello", {"demo", "42", "n1"})));  // key
  BOOST_TEST(!mac_equal(m, std::vector<char>(m.begin(), m.begin() + 16)));  // truncated
  BOOST_TEST(!mac_equal({}, {}));  // an empty MAC never matches
}

BOOST_AUTO_TEST_CASE(nonces_are_fresh) {
  auto a = random_nonce(), b = random_nonce();
  BOOST_TEST(a.size() == 32u);
  BOOST_TEST(!mac_equal(a, b));
}

// The comparison looks at every byte: a MAC differing only in its last
// byte, or in its first, does not match; nor does one of another length.
BOOST_AUTO_TEST_CASE(mac_equal_compares_every_byte) {
  std::vector<char> a(32, 'x');
  BOOST_TEST(mac_equal(a, a));
  for (std::size_t i : {std::size_t{0}, std::size_t{17}, std::size_t{31}}) {
    auto b = a;
    b[i] = static_cast<char>(b[i] ^ 0x01);
    BOOST_TEST(!mac_equal(a, b), "byte " << i);
  }
  BOOST_TEST(!mac_equal(a, std::vector<char>(33, 'x')));
  // The nonces fill what they are asked for, from the kernel's CSPRNG.
  BOOST_TEST(random_nonce(1000).size() == 1000u);
  BOOST_TEST(random_nonce(0).empty());
  BOOST_TEST(check_crypto().ok());  // libcrypto.so.3 is installed where this runs
}

BOOST_AUTO_TEST_CASE(no_secret_configured_means_empty) {
  topology::runtime_settings rt;
  auto s = load_cluster_secret(rt);
  BOOST_REQUIRE(s.has_value());
  BOOST_TEST(s->empty());
}

BOOST_AUTO_TEST_CASE(secret_file_is_read_trimmed_and_checked) {
  topology::runtime_settings rt;
  rt.secret_file = scratch("good.secret");
  {
    std::ofstream(rt.secret_file) << "correct horse battery staple\n\n";
  }
  ::chmod(rt.secret_file.c_str(), 0644);
  std::string warning;
  auto s = load_cluster_secret(rt, &warning);
  BOOST_REQUIRE(s.has_value());
  BOOST_TEST(*s == "correct horse battery staple");
  BOOST_TEST(warning.find("other users") != std::string::npos);
  ::chmod(rt.secret_file.c_str(), 0600);
  warning.clear();
  BOOST_REQUIRE(load_cluster_secret(rt, &warning).has_value());
  BOOST_TEST(warning.empty());

  rt.secret_file = scratch("short.secret");
  { std::ofstream(rt.secret_file) << "tooshort\n"; }
  auto shorter = load_cluster_secret(rt);
  BOOST_REQUIRE(!shorter.has_value());
  BOOST_TEST(shorter.error().message().find("at least 16") != std::string::npos);

  rt.secret_file = scratch("missing.secret");
  auto missing = load_cluster_secret(rt);
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message().find("missing.secret") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(secret_env_must_be_set) {
  topology::runtime_settings rt;
  rt.secret_env = "HETFLOW_AUTH_TEST_SECRET";
  ::unsetenv("HETFLOW_AUTH_TEST_SECRET");
  auto unset = load_cluster_secret(rt);
  BOOST_REQUIRE(!unset.has_value());
  BOOST_TEST(unset.error().message().find("HETFLOW_AUTH_TEST_SECRET") != std::string::npos);
  ::setenv("HETFLOW_AUTH_TEST_SECRET", "0123456789abcdef-and-more", 1);
  auto set = load_cluster_secret(rt);
  BOOST_REQUIRE(set.has_value());
  BOOST_TEST(*set == "0123456789abcdef-and-more");
}
