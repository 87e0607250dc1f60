#!/usr/bin/python3
"""The PyTorch gloo peer of hetflow's allreduce_bench, timed like mpi_allreduce.cpp.

torch.distributed all_reduce (backend "gloo", ReduceOp.SUM, in place, float32)
of each size: one checked all-reduce first (the result is compared with the
expected sum), `warmup` untimed, then `iterations` timed one by one with no
barrier between them; the median of the per-iteration times on rank 0 (the
upper median for an even count, as mpi_allreduce.cpp takes it). Bus bandwidth
as NCCL-tests define it: 2 (N-1)/N * bytes / time.

  /usr/bin/python3 gloo_allreduce.py NPROCS ITER WARMUP BYTES...
  /usr/bin/python3 gloo_allreduce.py --rank R NPROCS ITER WARMUP BYTES...

Starts NPROCS worker processes on this host itself (MASTER_ADDR=127.0.0.1,
MASTER_PORT from the environment or a free port; no torchrun). gloo runs over
TCP on loopback (GLOO_SOCKET_IFNAME=lo); each worker uses one thread
(torch.set_num_threads(1), OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1).
With --rank R it runs only rank R of NPROCS, in this process, for ranks
started elsewhere (another network namespace or host): MASTER_ADDR and
MASTER_PORT must be set (rank 0 serves the rendezvous store there), and
GLOO_SOCKET_IFNAME, when set, picks gloo's interface.
Run it with Debian's /usr/bin/python3 (python3-torch). Prints one line per
size, from rank 0: "bytes time_us algbw_gbps busbw_gbps".
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_ranks import run_ranks  # noqa: E402


def worker(rank, world, iterations, warmup, sizes):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    for nbytes in sizes:
        n = nbytes // 4
        # The same values as mpi_allreduce.cpp: ((i * 2654435761 + rank) % 1000) * 1e-20f.
        h = torch.arange(n, dtype=torch.int64).mul_(2654435761)
        buf = (h + rank).remainder_(1000).to(torch.float32).mul_(1e-20)
        # One checked all-reduce first: each element's sum is an exact multiple
        # of 1e-20 (well inside float32's normal range).
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        k = torch.zeros(n, dtype=torch.int64)
        for r in range(world):
            k += (h + r).remainder_(1000)
        expected = k.to(torch.float64).mul_(1e-20)
        del h, k
        if not torch.allclose(buf.to(torch.float64), expected, rtol=1e-5, atol=0.0):
            bad = int((buf.to(torch.float64) - expected).abs().argmax())
            sys.exit("rank %d: wrong all-reduce result for %d bytes at element %d: %g, expected %g"
                     % (rank, nbytes, bad, float(buf[bad]), float(expected[bad])))
        del expected
        for _ in range(warmup):
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            times.append(time.perf_counter() - t0)
        times.sort()
        t = times[len(times) // 2]
        if rank == 0:
            print("%d %.1f %.3f %.3f" % (nbytes, t * 1e6, nbytes / t / 1e9,
                                         2.0 * (world - 1) / world * nbytes / t / 1e9), flush=True)
    dist.destroy_process_group()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        rank, world, iterations, warmup = (int(x) for x in sys.argv[2:6])
        worker(rank, world, iterations, warmup, [int(x) for x in sys.argv[6:]])
        return 0
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        if len(sys.argv) < 7:
            sys.exit("usage: %s --rank R NPROCS ITER WARMUP BYTES..." % sys.argv[0])
        for v in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(v):
                sys.exit("%s: --rank needs %s in the environment" % (sys.argv[0], v))
        rank, world, iterations, warmup = (int(x) for x in sys.argv[2:6])
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world),
                          OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # before importing torch
        worker(rank, world, iterations, warmup, [int(x) for x in sys.argv[6:]])
        return 0
    if len(sys.argv) < 5:
        sys.exit("usage: %s [--rank R] NPROCS ITER WARMUP BYTES..." % sys.argv[0])
    world = int(sys.argv[1])
    return run_ranks(world, lambda rank: [sys.executable, os.path.abspath(__file__), "--worker", str(rank), str(world)]
                     + sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
