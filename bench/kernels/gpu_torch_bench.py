#!/usr/bin/env python3
"""PyTorch side of bench/kernels/gpu_run.sh: trains VGG-16 or ResNet-50 on
synthetic 224x224x3 images on one GPU and prints training images/s as JSON.

The models are written out here layer for layer as hetflow's zoo builds them
(kernels/zoo.cpp), so both sides train the same network; the recipe matches
hetflow's train job: SGD momentum 0.9, softmax cross-entropy, a host batch
copied to the GPU each step, the loss read back each step. cuDNN settings are
PyTorch's defaults plus cudnn.benchmark=True (hetflow also benchmarks conv
algorithms once per shape): TF32 allowed for convolutions, not for matmuls.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def vgg16(classes):
    cfg = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]
    layers, c = [], 3
    for v in cfg:
        if v == 0:
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, v, 3, 1, 1), nn.ReLU(inplace=True)]
            c = v
    layers += [nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
               nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(4096, classes)]
    return nn.Sequential(*layers)


def conv_bn(cin, cout, k, s, p, relu):
    m = [nn.Conv2d(cin, cout, k, s, p, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        m.append(nn.ReLU(inplace=True))
    return m


class Bottleneck(nn.Module):
    def __init__(self, cin, w, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, w, 1, 1, 0, True), *conv_bn(w, w, 3, stride, 1, True),
                                  *conv_bn(w, 4 * w, 1, 1, 0, False))
        self.shortcut = (nn.Sequential(*conv_bn(cin, 4 * w, 1, stride, 0, False))
                         if stride != 1 or cin != 4 * w else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def resnet50(classes):
    layers = [*conv_bn(3, 64, 7, 2, 3, True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, blocks in enumerate([3, 4, 6, 3]):
        w = 64 << stage
        for b in range(blocks):
            layers.append(Bottleneck(cin, w, 2 if stage > 0 and b == 0 else 1))
            cin = 4 * w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["vgg16", "resnet50"], required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    # hetflow's [job] precision and its nearest PyTorch setting:
    #   tf32 -> PyTorch's defaults (TF32 convolutions, f32 matmuls)
    #   bf16 -> also torch.set_float32_matmul_precision("medium"): bf16
    #           matmuls inside f32 tensors, as hetflow's bf16
    #   f16  -> torch.autocast(float16) + GradScaler: PyTorch's AMP, which
    #           also keeps activations in f16 (hetflow keeps them f32)
    ap.add_argument("--precision", choices=["tf32", "bf16", "f16"], default="tf32")
    a = ap.parse_args()
    if a.precision == "bf16":
        torch.set_float32_matmul_precision("medium")
    if not torch.cuda.is_available():
        raise SystemExit("gpu_torch_bench.py: torch sees no CUDA device")
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda:0")
    torch.manual_seed(1)
    model = (vgg16 if a.model == "vgg16" else resnet50)(a.classes).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # Synthetic data on the host, one batch copied per step (as hetflow's trainer does).
    n = a.batch * 4
    images = torch.randn(n, 3, 224, 224)
    labels = torch.randint(0, a.classes, (n,))

    amp = a.precision == "f16"
    scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def step(i):
        j = (i % 4) * a.batch
        x = images[j:j + a.batch].to(dev)
        y = labels[j:j + a.batch].to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {"model": a.model, "batch": a.batch, "steps": a.steps, "precision": a.precision,
           "images_per_s": a.batch * a.steps / dt,
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version()}
    print(json.dumps(out) if a.json else out)


if __name__ == "__main__":
    main()
