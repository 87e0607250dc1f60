#!/usr/bin/env python3
"""PyTorch side of bench/kernels/run.sh: train one model on Fashion-MNIST for a
number of steps/epochs and print training images/s and test accuracy.

Same recipe as hetflow's bench binary: inputs normalised with the training
set's mean and std, SGD momentum 0.9, lr 0.05, batch 64, shuffled every epoch,
last partial batch dropped, tensors preloaded (no DataLoader overhead), fp32.

Run with /usr/bin/python3 (Debian's torch 1.13 CPU build).
"""
import argparse, gzip, json, os, struct, sys, time

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5", choices=["mlp", "lenet5"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="0 = whole epochs")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import numpy as np
    import torch
    import torch.nn as nn
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    def idx(name):
        with gzip.open(os.path.join(a.data, name), "rb") as f:
            raw = f.read()
        magic = struct.unpack(">I", raw[:4])[0]
        nd = magic & 0xff
        dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)

    xtr = torch.from_numpy(idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    ytr = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = torch.from_numpy(idx("t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    yte = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = xtr.mean().item(), xtr.std().item()
    xtr = ((xtr - mean) / std).contiguous()
    xte = ((xte - mean) / std).contiguous()

    if a.model == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                              nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(16 * 4 * 4, 120), nn.ReLU(),
                              nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    n = xtr.shape[0]
    steps_per_epoch = n // a.batch
    g = torch.Generator().manual_seed(a.seed)
    train_s = 0.0
    images = 0
    loss_v = float("nan")
    for epoch in range(a.epochs):
        perm = torch.randperm(n, generator=g)
        model.train()
        steps = steps_per_epoch if a.max_steps <= 0 else min(a.max_steps, steps_per_epoch)
        t0 = time.perf_counter()
        for s in range(steps):
            ix = perm[s * a.batch:(s + 1) * a.batch]
            xb, yb = xtr[ix], ytr[ix]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        loss_v = loss.item()
        train_s += time.perf_counter() - t0
        images += steps * a.batch
    model.eval()
    with torch.no_grad():
        correct = 0
        for i in range(0, xte.shape[0], 1000):
            correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
    acc = correct / xte.shape[0]
    res = {"framework": "pytorch " + torch.__version__, "model": a.model, "batch": a.batch,
           "threads": a.threads, "images_per_s": images / train_s, "test_accuracy": acc,
           "final_loss": loss_v, "train_seconds": train_s}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"pytorch {a.model} batch {a.batch} threads {a.threads}: "
              f"{res['images_per_s']:.0f} images/s, test accuracy {acc:.4f}, loss {loss_v:.4f}")

if __name__ == "__main__":
    main()
