#!/usr/bin/env bash
# The HetPipe paper's setting (4 nodes x 4 GPUs: TITAN V, TITAN RTX,
# RTX 2060, Quadro P4000; VGG-19 and ResNet-152 at batch 32), simulated:
# NP / ED / HD allocation, PS spread or local, against data parallelism over
# the GPUs that hold the model. Prints a Markdown table.
#
#   bench/simulate/paper.sh               # uses build/bin/hetflow
#   HETFLOW=/path/to/hetflow bench/simulate/paper.sh
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
hetflow="${HETFLOW:-$src/build/bin/hetflow}"
dir="$src/deploy/examples/hetpipe-paper"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for model in vgg19 resnet152; do
  for f in "$dir/$model"-{np,ed,hd}{,-local}.toml "$dir/$model-dp.toml" "$dir/$model-dp-equal.toml"; do
    "$hetflow" simulate "$f" --json > "$tmp/$(basename "$f" .toml).json"
  done
done
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
print("| model | strategy | PS | VWs x stages | Nm | planner samples/s | simulated samples/s | vs DP (rows by speed) |")
print("|---|---|---|---|---:|---:|---:|---:|")
for model in ("vgg19", "resnet152"):
    dp = json.load(open(os.path.join(tmp, f"{model}-dp.json")))
    dps = dp["simulated_samples_per_s"]
    for pol in ("np", "ed", "hd"):
        for suffix in ("", "-local"):
            j = json.load(open(os.path.join(tmp, f"{model}-{pol}{suffix}.json")))
            vws = j["virtual_workers"]
            shape = f"{len(vws)} x {len(vws[0]['stages'])}"
            print(f"| {model} | HetPipe {pol.upper()} | {j['ps_placement']} | {shape} | {j['nm']} | "
                  f"{j['predicted_samples_per_s']:.1f} | {j['simulated_samples_per_s']:.1f} | "
                  f"{j['simulated_samples_per_s'] / dps:.2f}x |")
    for name, label in (("dp", "rows by speed"), ("dp-equal", "equal rows, like Horovod")):
        d = json.load(open(os.path.join(tmp, f"{model}-{name}.json")))
        reps = d["replicas"]
        kinds = sorted({r["kind"] for r in reps})
        s = d["simulated_samples_per_s"]
        print(f"| {model} | DP ring, {len(reps)} GPUs ({', '.join(kinds)}), {label} | - | - | - | {s:.1f} | "
              f"{s:.1f} | {s / dps:.2f}x |")
PY
