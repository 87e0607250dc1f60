// cluster_auth: the cluster secret and the HMAC challenge nodes use to prove
// it to each other on connect. Plain C++ (OpenSSL's HMAC, loaded when a
// secret needs it; nonces from getrandom), no CAF.
//
//   joining node J                              listening node L (its gate)
//   ----------------------------------------    -------------------------------
//   challenge                             --->  nonce_L (32 random bytes, kept
//                                                for J's CAF node id, used once)
//                                         <---  nonce_L
//   hello(cluster, hash, J, idx, dp,
//         nonce_J, mac_J)                 --->  checks mac_J = H("hello", cluster,
//                                                hash, J, idx, nonce_L, nonce_J)
//                                         <---  ok, L, ..., mac_L = H("welcome",
//                                                L, idx_L, nonce_J, nonce_L),
//                                                and L's node actor
//   checks mac_L; only now does J hold L's node actor (the gate, which
//   answers nothing else, is all a stranger can reach).
//
// H = HMAC-SHA256 keyed with the secret over the length-prefixed parts, so
// neither side can be replayed against the other (each MAC covers the
// other's fresh nonce and a different label).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/error.hpp"
#include "topology/cluster.hpp"

namespace hetflow::actors {

// The shortest secret accepted (bytes, after trailing whitespace is dropped).
inline constexpr std::size_t min_secret_bytes = 16;

// The secret the topology names: the content of secret_file (trailing
// whitespace dropped) or the value of the environment variable secret_env;
// empty when neither is set (no authentication). Errors name the file or
// variable and say what to do. `warning` gets a note for a secret file that
// others may read (mode & 077).
expected<std::string> load_cluster_secret(const topology::runtime_settings& rt, std::string* warning = nullptr);

// `n` bytes from the kernel's CSPRNG (getrandom).
std::vector<char> random_nonce(std::size_t n = 32);

// Whether the MACs can be made: OpenSSL's libcrypto.so.3 is loaded at the
// first (load_cluster_secret checks it when a secret is set; hetflow does
// not link it). hmac_sha256 and auth_mac throw std::runtime_error without it.
status check_crypto();

// HMAC-SHA256(key, label || for each part: 8-byte little-endian length || bytes).
std::vector<char> auth_mac(std::string_view key, std::string_view label,
                           const std::vector<std::string_view>& parts);

// The data-plane token of a cluster with this secret (never 0): the first 8
// bytes of H("hetflow-data-plane", cluster name, topology content hash).
// Every node of the cluster derives the same value; see
// schemas::set_wire_token.
uint64_t data_plane_token(std::string_view secret, std::string_view cluster_name, uint64_t content_hash);

// Constant-time equality of two MACs (false when the sizes differ).
bool mac_equal(const std::vector<char>& a, const std::vector<char>& b);

// HMAC-SHA256 of raw bytes (exposed for the RFC 4231 test vectors).
std::vector<char> hmac_sha256(std::string_view key, std::string_view data);

}  // namespace hetflow::actors
