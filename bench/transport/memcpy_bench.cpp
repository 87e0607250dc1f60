// Single-thread memory copy bandwidth for the transport benchmark's table
// (the floor any same-host transport is compared with).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // warm up, fault pages in
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    a[i % bytes] = static_cast<char>(i);
    std::memcpy(b.data(), a.data(), bytes);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.3f\n", static_cast<double>(bytes) * reps / s / 1e9);
  return b[bytes / 2] == 42 ? 1 : 0;
}
