#!/usr/bin/python3
"""PyTorch peer for bench/dlrm/run.sh: the same DLRM as hetflow's zoo `dlrm`
(bottom MLP on 13 dense features ending in the embedding dim, one embedding
table per categorical column, pairwise dot interaction of the 27 feature
vectors, top MLP, 2-class softmax cross-entropy), trained with plain SGD
(sparse embedding gradients) or Adam (SparseAdam on the tables: lazy, as
hetflow's Adam on sparse rows) on the same packed records hetflow's
preprocess job writes: {int32 label; float32 dense[13]; int32 sparse[26]}.

  torch_dlrm.py DIR --batch 128 --epochs 1 --threads 1 [--test-fraction 0.1]
                [--embedding-dim 16] [--bottom 512,256,64] [--top 512,256] [--lr 0.1]
                [--optimizer sgd|adam] [--max-steps N]

Prints one JSON line: samples_per_s (training steps only, data in memory),
test_logloss, test_auc, rows.
"""
import argparse, glob, json, os, sys, time

import numpy as np
import torch
import torch.nn as nn

rec = np.dtype([("label", "<i4"), ("dense", "<f4", (13,)), ("sparse", "<i4", (26,))])


def load(d):
    parts = sorted(glob.glob(os.path.join(d, "part-*.bin")))
    if not parts:
        sys.exit(f"no part-*.bin in {d}")
    return np.concatenate([np.fromfile(p, dtype=rec) for p in parts])


def table_rows(d, data):
    rows = []
    for c in range(26):
        v = os.path.join(d, f"vocab-{c:02d}.tsv")
        if os.path.exists(v):
            with open(v, "rb") as f:
                rows.append(sum(1 for _ in f) + 1)
        else:
            rows.append(int(data["sparse"][:, c].max()) + 1)
    return rows


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes) or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, rows, dim, bottom, top):
        super().__init__()
        self.bottom = mlp([13] + bottom + [dim], True)
        self.emb = nn.ModuleList([nn.Embedding(r, dim, sparse=True) for r in rows])
        f = len(rows) + 1
        self.li, self.lj = torch.tril_indices(f, f, offset=-1)
        self.top = mlp([dim + f * (f - 1) // 2] + top + [2], False)

    def forward(self, dense, sparse):
        b = self.bottom(dense)
        feats = torch.stack([b] + [e(sparse[:, i]) for i, e in enumerate(self.emb)], dim=1)
        z = torch.bmm(feats, feats.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([b, z], dim=1))


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks of ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    pos = labels == 1
    npos, nneg = pos.sum(), (~pos).sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    return float((r[pos].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("dir")
    a.add_argument("--batch", type=int, default=128)
    a.add_argument("--epochs", type=int, default=1)
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--test-fraction", type=float, default=0.1)
    a.add_argument("--embedding-dim", type=int, default=16)
    a.add_argument("--bottom", default="512,256,64")
    a.add_argument("--top", default="512,256")
    a.add_argument("--lr", type=float, default=0.1)
    a.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    a.add_argument("--max-steps", type=int, default=0)
    o = a.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(1)
    data = load(o.dir)
    rows = table_rows(o.dir, data)
    n = len(data)
    ntest = int(n * o.test_fraction)
    ntrain = n - ntest
    dense = torch.from_numpy(np.ascontiguousarray(data["dense"]))
    sparse = torch.from_numpy(np.ascontiguousarray(data["sparse"]).astype(np.int64))
    label = torch.from_numpy(data["label"].astype(np.int64))
    ints = lambda s: [int(x) for x in s.split(",") if x]
    model = DLRM(rows, o.embedding_dim, ints(o.bottom), ints(o.top))
    if o.optimizer == "sgd":
        opts = [torch.optim.SGD(model.parameters(), lr=o.lr)]
    else:  # lazy Adam on the embedding rows (as hetflow's sparse Adam), Adam on the rest
        emb = [p for m in model.emb for p in m.parameters()]
        rest = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
        opts = [torch.optim.SparseAdam(emb, lr=o.lr), torch.optim.Adam(rest, lr=o.lr)]
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    samples, secs = 0, 0.0
    for _ in range(o.epochs):
        perm = torch.randperm(ntrain, generator=g)
        t0 = time.perf_counter()
        steps = 0
        for s in range(0, ntrain, o.batch):
            idx = perm[s:s + o.batch]
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            loss = lossf(model(dense[idx], sparse[idx]), label[idx])
            loss.backward()
            for opt in opts:
                opt.step()
            samples += len(idx)
            steps += 1
            if o.max_steps and steps >= o.max_steps:
                break
        secs += time.perf_counter() - t0
    with torch.no_grad():
        logits = torch.cat([model(dense[i:i + 4096], sparse[i:i + 4096])
                            for i in range(ntrain, n, 4096)])
        y = label[ntrain:]
        logloss = float(nn.functional.cross_entropy(logits, y))
        p = torch.softmax(logits, dim=1)[:, 1].numpy()
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "threads": o.threads, "rows": n,
                      "batch": o.batch, "samples_per_s": samples / secs if secs > 0 else 0,
                      "test_logloss": logloss, "test_auc": auc(p, y.numpy())}))


if __name__ == "__main__":
    main()
