#include "actors/cluster_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

}  // namespace

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
    return secret;
  }
  return std::string{};
}

std::vector<char> random_nonce(std::size_t n) {
  std::vector<char> out(n);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    throw std::runtime_error("RAND_bytes failed: no entropy for the authentication nonce");
  return out;
}

std::vector<char> hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
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
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace hetflow::actors
