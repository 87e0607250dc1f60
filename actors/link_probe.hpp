// What a link between two nodes carries, timed as the job's messages take
// it: round trips of a tensor of probe_bytes() and of a 4-byte one, each
// sent back at once without the tensor by the other side. The RALP server
// also times "cold" rounds: 4 bytes after each side has been idle
// cold_gap_ms (the other side holds its answer that long and says how long
// it held it), which is what a message costs in a training step, where the
// receiver has been computing or waiting (on a 2-vCPU VM: ~0.1 ms one way
// against ~0.03 ms in back-to-back round trips). The HetPipe head
// (hetpipe/hp_profiles.cpp, blocking) and the RALP server
// (ralp/ralp_server.cpp, event-based) send the rounds; this is what they
// share: how many rounds, how long an answer may take, the size, and what
// the times say.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hetflow::actors::link_probe {

// Untimed rounds of each size first; then the timed ones, small first.
inline constexpr int warmup_rounds = 2;
inline constexpr int small_timed = 9;
inline constexpr int big_timed = 7;
// Cold rounds (after the others): one untimed, then these; the gap each
// side is idle before a cold round's message reaches it.
inline constexpr int cold_warmup = 1;
inline constexpr int cold_timed = 7;
inline constexpr double cold_gap_ms = 1.0;
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
  double cold_ms = 0;               // median cold round trip less the hold; 0: not timed
  // One message's latency to a receiver that has been idle (half a cold
  // round trip); 0: not timed.
  double latency_us() const { return cold_ms > 0 ? cold_ms / 2 * 1e3 : 0.0; }
  // 0: not resolved (the big round trip within 10% of the small one: a
  // difference of two medians that small says nothing of the bandwidth).
  double gbps() const {
    const double ms = big_ms - small_ms;
    return ms > 0.1 * big_ms ? double(bytes) * 8 / (ms * 1e-3) / 1e9 : 0.0;
  }
  // "8.39 MB in 4.454 ms, 4 B in 0.086 ms (round trips)[, 4 B after 1 ms
  // idle in 0.212 ms]"
  std::string describe() const {
    char buf[192];
    int n = std::snprintf(buf, sizeof buf, "%.2f MB in %.3f ms, 4 B in %.3f ms (round trips)", double(bytes) / 1e6,
                          big_ms, small_ms);
    if (cold_ms > 0 && n > 0 && std::size_t(n) < sizeof buf)
      std::snprintf(buf + n, sizeof buf - std::size_t(n), ", 4 B after %g ms idle in %.3f ms", cold_gap_ms, cold_ms);
    return buf;
  }
};

}  // namespace hetflow::actors::link_probe
