#include "actors/cluster_auth.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "schemas/lazy_library.hpp"

namespace hetflow::actors {

namespace {

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

status check_length(const std::string& s, const std::string& what) {
  if (s.size() < min_secret_bytes)
    return make_error(errc::invalid_argument,
                      what + " holds " + std::to_string(s.size()) + " bytes; a cluster secret needs at least " +
                          std::to_string(min_secret_bytes) +
                          " (e.g. head -c 32 /dev/urandom | base64)");
  return {};
}

// OpenSSL's HMAC, loaded at the first MAC: hetflow links no libcrypto. Only
// a cluster with a secret makes MACs (nonces come from getrandom, MACs are
// compared here), and linked, libcrypto's relocation took ~5-10 ms of every
// process's start after a pause on the 2-core VM (2026-11-29). Failures
// are reported by check_crypto, not on stderr.
constinit hetflow::lazy_library libcrypto("libcrypto.so.3",
                                          "OpenSSL's libcrypto (Debian package libssl3), which the cluster secret's "
                                          "MACs need",
                                          false);

}  // namespace

status check_crypto() {
  if (const std::string& e = libcrypto.load_error(); !e.empty()) return make_error(errc::unsupported, e);
  if (!libcrypto.symbol("HMAC") || !libcrypto.symbol("EVP_sha256"))
    return make_error(errc::unsupported, "libcrypto.so.3 has no HMAC or EVP_sha256 (OpenSSL 3 expected)");
  return {};
}

expected<std::string> load_cluster_secret(const topology::runtime_settings& rt, std::string* warning) {
  if (!rt.secret_file.empty()) {
    const std::string path = rt.secret_file.string();
    std::ifstream in(rt.secret_file, std::ios::binary);
    if (!in)
      return make_error(errc::not_found, "cannot read the cluster secret file " + path +
                                             " ([cluster] secret_file): it is missing or not readable");
    std::ostringstream os;
    os << in.rdbuf();
    struct stat st {};
    if (warning && ::stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
      *warning = "the cluster secret file " + path + " can be read by other users (chmod 600 it)";
    std::string secret = rstrip(os.str());
    HF_RETURN_IF_ERROR(check_length(secret, "the cluster secret file " + path));
    HF_RETURN_IF_ERROR(check_crypto());
    return secret;
  }
  if (!rt.secret_env.empty()) {
    const char* v = std::getenv(rt.secret_env.c_str());
    if (!v || !*v)
      return make_error(errc::invalid_argument,
                        "[cluster] secret_env names the environment variable " + rt.secret_env +
                            ", which is not set (or empty) for this node; export the cluster secret in it");
    std::string secret = rstrip(v);
    HF_RETURN_IF_ERROR(check_length(secret, "the environment variable " + rt.secret_env));
    HF_RETURN_IF_ERROR(check_crypto());
    return secret;
  }
  return std::string{};
}

std::vector<char> random_nonce(std::size_t n) {
  std::vector<char> out(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out.data() + got, n - got, 0);  // the kernel's CSPRNG, blocks until seeded
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw std::runtime_error(std::string("getrandom failed: no entropy for the authentication nonce: ") +
                               std::strerror(errno));
    got += std::size_t(r);
  }
  return out;
}

std::vector<char> hmac_sha256(std::string_view key, std::string_view data) {
  static const auto hmac = reinterpret_cast<decltype(&::HMAC)>(libcrypto.symbol("HMAC"));
  static const auto sha256 = reinterpret_cast<decltype(&::EVP_sha256)>(libcrypto.symbol("EVP_sha256"));
  if (hmac == nullptr || sha256 == nullptr) throw std::runtime_error(check_crypto().message());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (hmac(sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), md, &len) == nullptr)
    throw std::runtime_error("HMAC-SHA256 failed");
  return std::vector<char>(reinterpret_cast<char*>(md), reinterpret_cast<char*>(md) + len);
}

std::vector<char> auth_mac(std::string_view key, std::string_view label,
                           const std::vector<std::string_view>& parts) {
  std::string msg(label);
  for (auto p : parts) {
    uint64_t n = p.size();
    for (int i = 0; i < 8; ++i) msg.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    msg.append(p);
  }
  return hmac_sha256(key, msg);
}

uint64_t data_plane_token(std::string_view secret, std::string_view cluster_name, uint64_t content_hash) {
  const std::string hash = std::to_string(content_hash);
  auto mac = auth_mac(secret, "hetflow-data-plane", {cluster_name, hash});
  uint64_t token = 0;
  std::memcpy(&token, mac.data(), sizeof token);
  return token != 0 ? token : 1;
}

bool mac_equal(const std::vector<char>& a, const std::vector<char>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  // Every byte compared, whatever differs (as CRYPTO_memcmp): the time says
  // nothing about where a forged MAC goes wrong.
  volatile unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace hetflow::actors
