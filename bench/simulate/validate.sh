#!/usr/bin/env bash
# Simulator validation: predicted (hetflow simulate) vs measured (hetflow run)
# training throughput on configurations this machine can run: LeNet-5 and the
# MLP on Fashion-MNIST, one cpu thread, strategy single and dp (2 nodes x 1
# thread), and LeNet-5 with strategy hetpipe (2 nodes x 1 thread: one VW of
# two stages, or two VWs of one stage; Nm = 4). Profiles come from the same unit profiler as `hetflow profile`
# (simulate measures them here when the topology names no profile_file; the
# profile table is printed first). Target: |error| <= 15%.
#
#   bench/simulate/validate.sh            # uses build/bin/hetflow
#   HETFLOW=/path/to/hetflow bench/simulate/validate.sh
#   CONFIGS="lenet5-hetpipe-1vw lenet5-hetpipe-2vw" bench/simulate/validate.sh   # a subset
#
# Timings on a busy machine are noise: run it on a quiet one.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
hetflow="${HETFLOW:-$src/build/bin/hetflow}"
dir="$src/bench/simulate/validate"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "| config | predicted samples/s | measured samples/s | error | dp model |"
echo "|---|---:|---:|---:|---|"
for cfg in ${CONFIGS:-lenet5-single mlp-single lenet5-dp mlp-dp lenet5-hetpipe-1vw lenet5-hetpipe-2vw}; do
  f="$dir/$cfg.toml"
  "$hetflow" profile "$f" > "$tmp/$cfg.profile.txt" 2>&1 || true
  as_run=()
  [[ "$cfg" == *hetpipe* ]] && as_run=(--as-run)  # the waves as the runtime does them (overlapped unless drained)
  "$hetflow" simulate "$f" --json "${as_run[@]}" > "$tmp/$cfg.sim.json"
  "$hetflow" run "$f" --report "$tmp/$cfg.report.json" > "$tmp/$cfg.run.txt" 2>&1
  python3 - "$cfg" "$tmp/$cfg.sim.json" "$tmp/$cfg.report.json" <<'PY'
import json, sys
cfg, sim, rep = sys.argv[1:]
sj = json.load(open(sim))
p = sj["simulated_samples_per_s"]
# dp: the co-located step factor and the all-reduce's time and model
note = ""
if "allreduce_ms" in sj and len(sj.get("replicas", [])) > 1:
    note = f"compute x {sj.get('step_factor', 1.0):.2f}, all-reduce {sj['allreduce_ms']:.3f} ms ({sj.get('allreduce_model', '')})"
r = json.load(open(rep))
# hetpipe: the run's head simulates its own plan (the profiles it measured,
# the waves as the runtime does them); a separate `simulate` measures its own
# profiles and may cut the stages elsewhere.
if "simulated_samples_per_s" in r:
    p = r["simulated_samples_per_s"]
def find_epochs(o):
    if isinstance(o, dict):
        if "epochs" in o and isinstance(o["epochs"], list):
            return o["epochs"]
        for v in o.values():
            e = find_epochs(v)
            if e: return e
    return None
ep = find_epochs(r) or []
# the last epoch (the first includes start-up and the speed probe)
m = ep[-1]["samples_per_s"] if ep else float("nan")
err = (p - m) / m * 100 if m == m and m > 0 else float("nan")
print(f"| {cfg} | {p:.0f} | {m:.0f} | {err:+.1f}% | {note} |")
PY
done
echo
echo "profiles used (hetflow profile):"
cat "$tmp"/*.profile.txt
