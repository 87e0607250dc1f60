#!/usr/bin/env bash
# HetPipe runtime vs data parallelism on a local heterogeneous setup (issue 7):
# two nodes of one cpu thread each, n1's device capped at `memory = 40MiB`, too
# small for the whole VGG-11 (width 0.25, Fashion-MNIST, batch 64) but big
# enough for a stage. Data parallelism can only use the devices that hold the
# whole model (n0: `hetflow plan` says so), so its baseline is n0 alone
# (strategy single); HetPipe pipelines one VW over both devices.
#
#   bench/hetpipe/run.sh            # uses build/bin/hetflow; STEPS=300 NMS="4 8 16"
#                                   # WAVES="overlap drain" (hetpipe_waves)
#                                   # PS_PLACEMENT="" (ps_placement; default: the job's)
#                                   # REPEATS=1: rounds of every configuration (each with its
#                                   # own DP baseline), then each ratio's median and range
#                                   # PROFILE_REPEAT=0: every run profiles on the spot (the
#                                   # head, while the other node starts); N > 0: one profile
#                                   # file first (`hetflow profile --out --repeat N`, the
#                                   # median of N), which every run plans from
#
# Prints per config the measured samples/s (the last epoch, training only),
# the planner's bound (drained waves: with each wave's fill and drain, as
# the planner prices them since 2026-12-07), the simulator's prediction for the waves as the runtime
# runs them, the ratio to the DP baseline, and the busiest stage's share of
# the run: the measured rate against the bound its stages' own compute
# allows (batch / the largest compute_seconds per minibatch of a stage,
# transfers left out): how much of the gap to the planner's bound is the
# runtime's (waits, hand-offs) rather than the profile's (the stages
# computing slower or faster than profiled). Timings on a busy machine are
# noise: run it on a quiet one.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
hetflow="${HETFLOW:-$src/build/bin/hetflow}"
steps="${STEPS:-300}"
nms="${NMS:-4 8 16}"
wave_modes="${WAVES:-overlap drain}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

source "$src/bench/hetpipe/capped_pair.sh"  # topo FILE JOB_LINES...

echo "machine: $(nproc) cpus, $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$src" rev-parse --short HEAD)"
profile_line=()
if (( ${PROFILE_REPEAT:-0} > 0 )); then
  topo "$tmp/prof.toml" 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 8'
  "$hetflow" profile "$tmp/prof.toml" --out "$tmp/profile.json" --repeat "$PROFILE_REPEAT" | head -2 | sed 's/^/  profile: /'
  profile_line=('profile_file = "profile.json"')
fi
topo "$tmp/plan.toml" 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 8' ${profile_line[@]+"${profile_line[@]}"}
"$hetflow" plan "$tmp/plan.toml" 2>&1 | grep -E '^ +[0-9]+ +n[0-9]|virtual worker 0:|data parallel' | sed 's/^/  plan: /'
topo "$tmp/single.toml" 'strategy = "single"'
rounds="${REPEATS:-1}"
: >"$tmp/rows.tsv"
for ((round = 1; round <= rounds; round++)); do
  "$hetflow" run "$tmp/single.toml" --report "$tmp/single.json" >"$tmp/single.out" 2>&1 || { cat "$tmp/single.out"; exit 1; }
  base=$(python3 -c "import json; print(json.load(open('$tmp/single.json'))['epochs'][-1]['samples_per_s'])")
  echo
  ((rounds > 1)) && echo "round $round of $rounds ($(date -u '+%H:%M:%S UTC'))"
  echo "| config | measured samples/s | planner bound | measured / bound | simulated (waves as run) | vs DP baseline | busiest stage's compute (ms a minibatch) | measured / its bound |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  printf "| DP baseline: single on n0 (the only device that holds the model) | %.0f | | | | 1.00x | | |\n" "$base"
  for nm in $nms; do
    for wm in $wave_modes; do
      f="$tmp/hp$nm-$wm"
      topo "$f.toml" 'strategy = "hetpipe"' 'virtual_workers = 1' "nm = $nm" "hetpipe_waves = \"$wm\"" \
        ${PS_PLACEMENT:+"ps_placement = \"$PS_PLACEMENT\""} ${profile_line[@]+"${profile_line[@]}"}
      "$hetflow" run "$f.toml" --report "$f.json" >"$f.out" 2>&1 || { cat "$f.out"; exit 1; }
      python3 - "$f.json" "$base" "$nm" "$tmp/rows.tsv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); base = float(sys.argv[2]); nm = sys.argv[3]
m = d["epochs"][-1]["samples_per_s"]
st = " + ".join(f"{s['node']} units {s['first_unit']}-{s['last_unit']}" for s in d["virtual_workers"][0]["stages"])
# The stages' own compute per minibatch (their reports: compute_seconds over
# minibatches); the busiest one bounds the pipeline at batch / its time.
names = {s["actor"] for s in d["virtual_workers"][0]["stages"]}
busiest = max(a["metrics"]["compute_seconds"] / a["metrics"]["minibatches"]
              for a in d["actors"] if a["name"] in names and a["metrics"].get("minibatches", 0) > 0)
own = d["batch_size"] / busiest
print(f"| hetpipe 1 VW ({st}), Nm = {nm}, waves {d['hetpipe_waves']}, PS {d['ps_placement']} | {m:.0f} | {d['predicted_samples_per_s']:.0f} | "
      f"{m / d['predicted_samples_per_s']:.2f}x | {d['simulated_samples_per_s']:.0f} | {m / base:.2f}x | {busiest * 1e3:.2f} | {m / own:.2f}x |")
with open(sys.argv[4], "a") as out:
    out.write(f"Nm = {nm}, waves {d['hetpipe_waves']}\t{m / d['predicted_samples_per_s']}\t{m / base}\t{m / own}\n")
PY
    done
  done
done
if ((rounds > 1)); then
  # Each configuration's ratios over the rounds (each round has its own DP
  # baseline): their median and range.
  python3 - "$tmp/rows.tsv" "$rounds" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    k, *v = line.rstrip("\n").split("\t")
    rows.setdefault(k, []).append([float(x) for x in v])
def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
print(f"\nover {sys.argv[2]} rounds: median (lowest-highest)")
print("| config | measured / bound | vs DP baseline | measured / its busiest stage's bound |")
print("|---|---:|---:|---:|")
for k, vs in rows.items():
    cols = [[v[i] for v in vs] for i in range(3)]
    print(f"| {k} | " + " | ".join(f"{med(c):.2f}x ({min(c):.2f}-{max(c):.2f})" for c in cols) + " |")
PY
fi
