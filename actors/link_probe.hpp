// What a link between two nodes carries, timed as the job's messages take
// it: round trips of a tensor of probe_bytes() and of a 4-byte one, each
// sent back at once without the tensor by the other side. The HetPipe head
// (hetpipe/hp_profiles.cpp, blocking) and the RALP server
// (ralp/ralp_server.cpp, event-based) send the rounds; this is what they
// share: how many rounds, how long an answer may take, the size, and what
// the times say.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hetflow::actors::link_probe {

// Untimed rounds of each size first; then the timed ones, small first.
inline constexpr int warmup_rounds = 2;
inline constexpr int small_timed = 9;
inline constexpr int big_timed = 7;
// Each answer is awaited at most this long: the probe is an estimate, and
// the other actors wait for their roles or welcomes meanwhile.
inline constexpr double answer_timeout_s = 5.0;

// The big tensor's bytes: the model's largest unit output for a batch (what
// one message between stages or workers carries), within 256 KiB .. 8 MiB
// and 1 MiB under what the other side reads (max_message), a multiple of 4.
inline uint64_t probe_bytes(uint64_t largest_output, uint64_t max_message) {
  uint64_t b = std::clamp<uint64_t>(largest_output, uint64_t{256} << 10, uint64_t{8} << 20);
  b = std::min<uint64_t>(b, std::max<uint64_t>(max_message, uint64_t{2} << 20) - (uint64_t{1} << 20));
  return b / 4 * 4;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct result {
  uint64_t bytes = 0;
  double big_ms = 0, small_ms = 0;  // median round trips
  // 0: not resolved (the big round trip within 10% of the small one: a
  // difference of two medians that small says nothing of the bandwidth).
  double gbps() const {
    const double ms = big_ms - small_ms;
    return ms > 0.1 * big_ms ? double(bytes) * 8 / (ms * 1e-3) / 1e9 : 0.0;
  }
  // "8.39 MB in 4.454 ms, 4 B in 0.086 ms (round trips)"
  std::string describe() const {
    char buf[120];
    std::snprintf(buf, sizeof buf, "%.2f MB in %.3f ms, 4 B in %.3f ms (round trips)", double(bytes) / 1e6, big_ms,
                  small_ms);
    return buf;
  }
};

}  // namespace hetflow::actors::link_probe
