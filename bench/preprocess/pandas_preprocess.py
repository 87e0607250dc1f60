#!/usr/bin/python3
"""The preprocess job's transforms in pandas (the benchmark's peer).

Same semantics as hetflow's vocab mode (kernels/preprocess/vocabulary.hpp):
  dense   missing -> 0, negatives -> 0, log(x + 1) as float32
  sparse  per column, strings (the missing value "" included) seen >= min_count
          times get ids 0..K-1 in sorted (byte) order; the rest map to K
  output  packed little-endian {int32 label; float32 dense[13]; int32 sparse[26]}

usage: /usr/bin/python3 pandas_preprocess.py IN.tsv OUT.bin [--min-count N] [--chunk-rows N]
Prints "pandas: ROWS rows in S s" (S: after the interpreter and imports).
Input must be well-formed (this peer does not detect malformed lines).

--chunk-rows N: two passes over the file in chunks of N rows, as a pandas
user would do for files that do not fit in memory (10M rows take ~13 GB in
one frame): pass 1 value_counts per column per chunk, summed; the kept
strings sorted into a pd.Index per column; pass 2 re-reads each chunk, maps
with Index.get_indexer (misses -> OOV) and appends the records.
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
    chunk_rows = 0
    if "--chunk-rows" in args:
        i = args.index("--chunk-rows")
        chunk_rows = int(args[i + 1])
        del args[i:i + 2]
    src, dst = args
    t0 = time.perf_counter()
    n = chunked(src, dst, min_count, chunk_rows) if chunk_rows > 0 else whole(src, dst, min_count)
    print(f"pandas: {n} rows in {time.perf_counter() - t0:.3f} s "
          f"(imports {t0 - t_import:.3f} s{f', chunks of {chunk_rows} rows' if chunk_rows else ''})")


DENSE = [f"I{i}" for i in range(1, 14)]
SPARSE = [f"C{i}" for i in range(1, 27)]
RECORD = np.dtype([("label", "<i4"), ("dense", "<f4", 13), ("sparse", "<i4", 26)])


def read(src, **kw):
    dtypes = {"label": np.int32}
    dtypes.update({c: np.float64 for c in DENSE})
    dtypes.update({c: object for c in SPARSE})
    return pd.read_csv(src, sep="\t", header=None, names=["label"] + DENSE + SPARSE, dtype=dtypes,
                       na_filter=True, keep_default_na=False, na_values={c: [""] for c in DENSE},
                       engine="c", **kw)


def dense_part(df, out):
    out["label"] = df["label"].to_numpy(np.int32)
    x = df[DENSE].to_numpy(np.float64)
    x = np.nan_to_num(x, nan=0.0)
    np.maximum(x, 0.0, out=x)
    out["dense"] = np.log(x + 1.0).astype(np.float32)


def chunked(src, dst, min_count, chunk_rows):
    counts = [None] * 26
    for df in read(src, chunksize=chunk_rows, usecols=list(range(14, 40))):
        for j, c in enumerate(SPARSE):
            vc = df[c].value_counts(sort=False)
            counts[j] = vc if counts[j] is None else counts[j].add(vc, fill_value=0)
    vocab = []
    for vc in counts:
        kept = vc[vc >= min_count].index
        vocab.append(pd.Index(sorted(kept)))
    n = 0
    with open(dst, "wb") as f:
        for df in read(src, chunksize=chunk_rows):
            out = np.empty(len(df), dtype=RECORD)
            dense_part(df, out)
            for j, c in enumerate(SPARSE):
                ids = vocab[j].get_indexer(df[c])
                ids[ids < 0] = len(vocab[j])
                out["sparse"][:, j] = ids.astype(np.int32)
            out.tofile(f)
            n += len(df)
    return n


def whole(src, dst, min_count):
    df = read(src)
    n = len(df)
    out = np.empty(n, dtype=RECORD)
    dense_part(df, out)
    for j, c in enumerate(SPARSE):
        codes, uniques = pd.factorize(df[c], sort=True)
        counts = np.bincount(codes, minlength=len(uniques))
        keep = counts >= min_count
        new_id = np.cumsum(keep) - 1
        k = int(keep.sum())
        out["sparse"][:, j] = np.where(keep[codes], new_id[codes], k).astype(np.int32)
    out.tofile(dst)
    return n


if __name__ == "__main__":
    main()
