#!/usr/bin/python3
"""The preprocess job's transforms in pandas (the benchmark's peer).

Same semantics as hetflow's vocab mode (kernels/preprocess/vocabulary.hpp):
  dense   missing -> 0, negatives -> 0, log(x + 1) as float32
  sparse  per column, strings (the missing value "" included) seen >= min_count
          times get ids 0..K-1 in sorted (byte) order; the rest map to K
  output  packed little-endian {int32 label; float32 dense[13]; int32 sparse[26]}

usage: /usr/bin/python3 pandas_preprocess.py IN.tsv OUT.bin [--min-count N]
Prints "pandas: ROWS rows in S s" (S: after the interpreter and imports).
Input must be well-formed (this peer does not detect malformed lines).
"""
import sys
import time

t_import = time.perf_counter()
import numpy as np
import pandas as pd


def main():
    args = sys.argv[1:]
    min_count = 1
    if "--min-count" in args:
        i = args.index("--min-count")
        min_count = int(args[i + 1])
        del args[i:i + 2]
    src, dst = args
    t0 = time.perf_counter()
    dense = [f"I{i}" for i in range(1, 14)]
    sparse = [f"C{i}" for i in range(1, 27)]
    dtypes = {"label": np.int32}
    dtypes.update({c: np.float64 for c in dense})
    dtypes.update({c: object for c in sparse})
    df = pd.read_csv(src, sep="\t", header=None, names=["label"] + dense + sparse, dtype=dtypes,
                     na_filter=True, keep_default_na=False, na_values={c: [""] for c in dense},
                     engine="c")
    n = len(df)
    out = np.empty(n, dtype=[("label", "<i4"), ("dense", "<f4", 13), ("sparse", "<i4", 26)])
    out["label"] = df["label"].to_numpy(np.int32)
    x = df[dense].to_numpy(np.float64)
    x = np.nan_to_num(x, nan=0.0)
    np.maximum(x, 0.0, out=x)
    out["dense"] = np.log(x + 1.0).astype(np.float32)
    for j, c in enumerate(sparse):
        codes, uniques = pd.factorize(df[c], sort=True)
        counts = np.bincount(codes, minlength=len(uniques))
        keep = counts >= min_count
        new_id = np.cumsum(keep) - 1
        k = int(keep.sum())
        out["sparse"][:, j] = np.where(keep[codes], new_id[codes], k).astype(np.int32)
    out.tofile(dst)
    print(f"pandas: {n} rows in {time.perf_counter() - t0:.3f} s "
          f"(imports {t0 - t_import:.3f} s)")


if __name__ == "__main__":
    main()
