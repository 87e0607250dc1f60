// The OpenMPI peer of hetflow's allreduce_bench: MPI_Allreduce (sum, in
// place, MPI_FLOAT) of each size, timed the same way (warmup untimed, then
// `iterations` timed; the median of the per-iteration times on rank 0),
// with bus bandwidth as NCCL-tests define it: 2 (N-1)/N * bytes / time.
//
//   mpicxx -O2 -o mpi_allreduce mpi_allreduce.cpp
//   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_allreduce ITER WARMUP BYTES...
// Prints one line per size: "bytes time_us algbw_gbps busbw_gbps".
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  int warmup = argc > 2 ? std::atoi(argv[2]) : 3;
  for (int a = 3; a < argc; ++a) {
    long long bytes = std::atoll(argv[a]);
    std::size_t n = static_cast<std::size_t>(bytes / 4);
    std::vector<float> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = float((i * 2654435761u + rank) % 1000) * 1e-20f;
    // One checked all-reduce first: every element against the sum of what
    // each rank put there (within float rounding).
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += double(float((i * 2654435761u + r) % 1000) * 1e-20f);
      if (std::abs(double(buf[i]) - want) > 1e-5 * std::abs(want) + 1e-30) {
        std::fprintf(stderr, "mpi_allreduce: rank %d: element %zu of %lld bytes is %g, want %g\n", rank, i,
                     bytes, double(buf[i]), want);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times.push_back(MPI_Wtime() - t0);
    }
    std::sort(times.begin(), times.end());
    double t = times[times.size() / 2];
    if (rank == 0)
      std::printf("%lld %.1f %.3f %.3f\n", bytes, t * 1e6, double(bytes) / t / 1e9,
                  2.0 * (size - 1) / size * double(bytes) / t / 1e9);
  }
  MPI_Finalize();
  return 0;
}
