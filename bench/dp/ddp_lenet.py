#!/usr/bin/python3
"""The PyTorch DDP peer of bench/dp/run.sh: data-parallel LeNet-5 on
Fashion-MNIST, 2 processes on this host, torch.distributed backend gloo.

  /usr/bin/python3 ddp_lenet.py [--batch B] [--steps S] [--warmup W] [--procs N]

Same recipe as hetflow's `train` job with strategy "dp" and dp_split "equal":
LeNet-5 as kernels/zoo.cpp builds it (conv 6@5x5 + ReLU, maxpool 2/2,
conv 16@5x5 + ReLU, maxpool 2/2, flatten, fc 120 + ReLU, fc 84 + ReLU,
fc 10; input 1x28x28), cross-entropy, SGD lr 0.05 momentum 0.9, fp32.
The training set is loaded into memory and normalised with its own mean and
(population) standard deviation, as hetflow's channel_stats does. One
shuffled order (same seed on every rank); global batch s is rows
[s*N*B, (s+1)*N*B) of it and rank r trains on its B rows
[s*N*B + r*B, s*N*B + (r+1)*B). DistributedDataParallel averages the
gradients (gloo all-reduce during backward), which is hetflow's update too
(each replica's gradients scaled by B / (N*B), then summed).

Timed: W untimed warm-up steps, a barrier, then S steps on rank 0's clock
(time.perf_counter), each step = gathering the rank's B rows of the batch
(index_select: a copy, like hetflow's batch assembly), zero_grad, forward,
loss, backward (with DDP's all-reduce), optimizer step, loss.item().
images/s = S * N * B / seconds (all replicas' samples, like hetflow's
epochs[0].samples_per_s).

The script starts its N worker processes itself (MASTER_ADDR=127.0.0.1,
MASTER_PORT from the environment or a free port, RANK/WORLD_SIZE; no
torchrun). gloo runs over TCP on loopback (GLOO_SOCKET_IFNAME=lo); every
worker uses one thread (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1 in its
environment before torch is imported, torch.set_num_threads(1)).
Run it with Debian's /usr/bin/python3 (python3-torch, torch 1.13). Prints,
from rank 0, one line:
  ddp images_per_s X seconds T steps S batch_per_replica B procs N loss L
(L: mean training loss over the timed steps, a sanity check).
"""
import argparse
import gzip
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_ranks import run_ranks  # noqa: E402


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    if magic >> 8 != 0x08:
        sys.exit("%s: not unsigned-byte IDX data (magic %08x)" % (path, magic))
    nd = magic & 0xff
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def worker(a, rank, world):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    x = load_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = load_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    x64 = x.astype(np.float64)
    mean = x64.mean()
    std = np.sqrt(max((x64 * x64).mean() - mean * mean, 0.0)) or 1.0
    del x64
    xtr = torch.from_numpy(((x - np.float32(mean)) / np.float32(std)).astype(np.float32)).unsqueeze(1).contiguous()
    ytr = torch.from_numpy(y)
    n = xtr.shape[0]
    gb = world * a.batch
    if (a.warmup + a.steps) * gb > n:
        sys.exit("warm-up + timed steps (%d) x global batch %d exceed the %d training rows"
                 % (a.warmup + a.steps, gb, n))

    torch.manual_seed(a.seed)  # DDP broadcasts rank 0's initial weights anyway
    model = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
                          nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
                          nn.Flatten(), nn.Linear(16 * 4 * 4, 120), nn.ReLU(),
                          nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed))
    ddp.train()

    def step(s):
        ix = perm[s * gb + rank * a.batch:s * gb + (rank + 1) * a.batch]
        xb = xtr.index_select(0, ix)
        yb = ytr.index_select(0, ix)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    for s in range(a.warmup):
        step(s)
    dist.barrier()
    loss_sum = 0.0
    t0 = time.perf_counter()
    for s in range(a.warmup, a.warmup + a.steps):
        loss_sum += step(s)
    secs = time.perf_counter() - t0
    if rank == 0:
        print("ddp images_per_s %.1f seconds %.4f steps %d batch_per_replica %d procs %d loss %.4f"
              % (a.steps * gb / secs, secs, a.steps, a.batch, world, loss_sum / a.steps), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="PyTorch DDP (gloo) LeNet-5 images/s, the peer of bench/dp/run.sh")
    ap.add_argument("--batch", type=int, default=32, help="batch per replica (global batch = procs * batch)")
    ap.add_argument("--steps", type=int, default=300, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before the clock starts")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker >= 0:
        worker(a, a.worker, int(os.environ["WORLD_SIZE"]))
        return 0

    args = sys.argv[1:]
    return run_ranks(a.procs, lambda r: [sys.executable, os.path.abspath(__file__)] + args + ["--worker", str(r)])


if __name__ == "__main__":
    sys.exit(main())
