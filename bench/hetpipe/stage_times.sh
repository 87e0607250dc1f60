#!/usr/bin/env bash
# Each HetPipe stage's planned time against its compute in the run, on the
# memory-capped VGG-11 pair of bench/hetpipe/run.sh (two one-thread nodes, n1
# capped at 40 MiB; one VW, Nm 4, overlapped waves).
#
#   bench/hetpipe/stage_times.sh [ROUNDS]   # default 3; uses build/bin/hetflow
#   PER_NODE=alternate (default) | 0 | 1
#       1: every node profiles its own device (HETFLOW_DRILL_REMOTE_PROFILE=1,
#       the test drill that treats each node as another machine); 0: the
#       head profiles for both (what `hetflow run` does on one host);
#       alternate: one of each per round
#
# Prints per run each stage's kind, units, planned stage_ms, compute per
# minibatch in the run (compute_seconds / minibatches) and their ratio, and
# the run's measured rate against the planner's bound.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
hetflow="${HETFLOW:-$src/build/bin/hetflow}"
rounds="${1:-3}"
per_node="${PER_NODE:-alternate}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
source "$src/bench/hetpipe/capped_pair.sh"
topo "$tmp/hp.toml" 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 4' 'hetpipe_waves = "overlap"'
one() {  # one DRILL(0|1)
  local label="the head's profile"
  (($1)) && label="each node's own profile"
  HETFLOW_DRILL_REMOTE_PROFILE=$1 "$hetflow" run "$tmp/hp.toml" --report "$tmp/hp.json" >"$tmp/hp.out" 2>&1 ||
    { cat "$tmp/hp.out"; exit 1; }
  python3 - "$tmp/hp.json" "$label" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
acts = {a["name"]: a["metrics"] for a in d["actors"]}
row = []
for s in d["virtual_workers"][0]["stages"]:
    m = acts[s["actor"]]
    c = m["compute_seconds"] / m["minibatches"] * 1e3
    row.append(f"{s['actor']} {s['kind']} units {s['first_unit']}-{s['last_unit']}: plan {s['stage_ms']:.2f} run {c:.2f} ms (x{c / s['stage_ms']:.3f})")
m = d["epochs"][-1]["samples_per_s"]
print(f"{sys.argv[2]}: " + " | ".join(row) + f" | measured {m:.0f} / bound {d['predicted_samples_per_s']:.0f} = {m / d['predicted_samples_per_s']:.2f}")
PY
}
for ((r = 1; r <= rounds; r++)); do
  case "$per_node" in
    alternate) one 0; one 1 ;;
    1) one 1 ;;
    *) one 0 ;;
  esac
done
