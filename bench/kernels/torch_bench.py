#!/usr/bin/env python3
"""PyTorch side of bench/kernels/run.sh: train one model on Fashion-MNIST for a
number of steps/epochs and print training images/s and test accuracy.

Same recipe as hetflow's bench binary: inputs normalised with the training
set's mean and std, SGD momentum 0.9, lr 0.05, batch 64, shuffled every epoch,
last partial batch dropped, tensors preloaded (no DataLoader overhead), fp32.

Models: the networks kernels/zoo.cpp builds for a 1x28x28 input, 10 classes
and width multiplier --width (channel / hidden widths scaled as zoo.cpp's
scaled(): round half away from zero, at least 1):
  mlp       flatten, fc 512, fc 256 (ReLU), fc 10
  lenet5    conv5x5 6, pool2, conv5x5 16, pool2, fc 120, fc 84 (ReLU), fc 10
  resnet18  small-input (< 64 px) stem: conv3x3/1 (no bias) + BN + ReLU, no max
            pool; 4 stages of 2 basic blocks (64, 128, 256, 512; stride 2 in
            the first block of stages 2-4): conv3x3 + BN + ReLU, conv3x3 + BN,
            shortcut identity or conv1x1/stride (no bias) + BN when the stride
            or channel count changes, add, ReLU; global average pool, fc 10
  vgg11     conv3x3/pad 1 (bias, ReLU) stack 64 P 128 P 256 256 P 512 512 P
            512 512 P where a 2x2 max pool P is skipped once the feature map is
            1x1 (28 -> 14 -> 7 -> 3 -> 1: the last one is skipped); head for
            inputs < 64 px: fc 512 (ReLU), fc 10, no dropout

Run with /usr/bin/python3 (Debian's torch 1.13 CPU build).
"""
import argparse, gzip, json, math, os, struct, sys, time


def scaled(base, width):
    """kernels/zoo.cpp scaled(): max(1, llround(base * width)); llround rounds
    halves away from zero (Python's round() would round them to even)."""
    x = base * width
    f = math.floor(x)
    return max(1, int(f + 1 if x - f >= 0.5 else f))


def build_model(name, width, classes=10, in_c=1, side=28):
    """Inputs below 64 px only (zoo.cpp builds another stem and head from 64)."""
    assert side < 64, side
    import torch.nn as nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(in_c * side * side, scaled(512, width)), nn.ReLU(),
                             nn.Linear(scaled(512, width), scaled(256, width)), nn.ReLU(),
                             nn.Linear(scaled(256, width), classes))
    if name == "lenet5":
        c1, c2, f1, f2 = scaled(6, width), scaled(16, width), scaled(120, width), scaled(84, width)
        s = ((side - 4) // 2 - 4) // 2
        return nn.Sequential(nn.Conv2d(in_c, c1, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(c2 * s * s, f1), nn.ReLU(),
                             nn.Linear(f1, f2), nn.ReLU(), nn.Linear(f2, classes))
    if name == "vgg11":
        layers, c, s = [], in_c, side
        for v in [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0]:
            if v == 0:
                if s >= 2:  # zoo.cpp: no pool once the map is 1x1
                    layers.append(nn.MaxPool2d(2, 2))
                    s //= 2
                continue
            o = scaled(v, width)
            layers += [nn.Conv2d(c, o, 3, 1, 1, bias=True), nn.ReLU(inplace=True)]
            c = o
        h = scaled(512, width)  # zoo.cpp's head below 64 px (head_width 0)
        layers += [nn.Flatten(), nn.Linear(c * s * s, h), nn.ReLU(inplace=True), nn.Linear(h, classes)]
        return nn.Sequential(*layers)
    if name == "resnet18":
        import torch

        def conv_bn(cin, cout, k, stride, pad, relu):
            m = [nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout)]
            return m + [nn.ReLU(inplace=True)] if relu else m

        class Basic(nn.Module):
            def __init__(self, cin, w, stride):
                super().__init__()
                self.body = nn.Sequential(*conv_bn(cin, w, 3, stride, 1, True), *conv_bn(w, w, 3, 1, 1, False))
                self.shortcut = (nn.Sequential(*conv_bn(cin, w, 1, stride, 0, False))
                                 if stride != 1 or cin != w else nn.Identity())

            def forward(self, x):
                return torch.relu(self.body(x) + self.shortcut(x))

        c = scaled(64, width)
        layers = conv_bn(in_c, c, 3, 1, 1, True)  # zoo.cpp's stem below 64 px
        for stage in range(4):
            w = scaled(64 << stage, width)
            for b in range(2):
                layers.append(Basic(c, w, 2 if stage > 0 and b == 0 else 1))
                c = w
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
        return nn.Sequential(*layers)
    raise ValueError(name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5", choices=["mlp", "lenet5", "resnet18", "vgg11"])
    ap.add_argument("--width", type=float, default=1.0, help="zoo width multiplier")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="0 = whole epochs")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not a.width > 0:
        ap.error("--width must be positive")

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

    model = build_model(a.model, a.width)
    params = sum(p.numel() for p in model.parameters())
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
    t_eval = time.perf_counter()
    with torch.no_grad():
        correct = 0
        for i in range(0, xte.shape[0], 1000):
            correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
    acc = correct / xte.shape[0]
    eval_s = time.perf_counter() - t_eval
    res = {"framework": "pytorch " + torch.__version__, "model": a.model, "width": a.width, "batch": a.batch,
           "threads": a.threads, "parameters": params, "steps": images // a.batch,
           "images_per_s": images / train_s, "test_accuracy": acc, "final_loss": loss_v,
           "train_seconds": train_s, "eval_seconds": eval_s}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"pytorch {a.model} width {a.width:g} ({params} parameters) batch {a.batch} threads {a.threads}: "
              f"{res['images_per_s']:.0f} images/s, test accuracy {acc:.4f}, loss {loss_v:.4f}")

if __name__ == "__main__":
    main()
