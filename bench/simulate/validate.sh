#!/usr/bin/env bash
# Simulator validation: predicted (hetflow simulate) vs measured (hetflow run)
# training throughput on configurations this machine can run: LeNet-5 and the
# MLP on Fashion-MNIST, one cpu thread, strategy single and dp (2 nodes x 1
# thread), LeNet-5 with strategy hetpipe (2 nodes x 1 thread: one VW of
# two stages, or two VWs of one stage; Nm = 4), and LeNet-5 with strategy ps
# (2 workers, 2 shards, bsp) and ralp (the server on n0, one worker on n1),
# 2 nodes x 1 thread. Profiles come from the same unit profiler as `hetflow profile`
# (simulate measures them here when the topology names no profile_file; the
# profile table is printed first). Target: |error| <= 15%.
#
#   bench/simulate/validate.sh            # uses build/bin/hetflow
#   HETFLOW=/path/to/hetflow bench/simulate/validate.sh
#   CONFIGS="lenet5-hetpipe-1vw lenet5-hetpipe-2vw" bench/simulate/validate.sh   # a subset
#
# Each configuration is simulated and run REPEAT times (default 3), one after
# the other; the error is the median prediction's against the median
# measurement (this VM's speed moves by several % between a simulation and
# the run after it); every repeat's own error is listed too.
#
# Timings on a busy machine are noise: run it on a quiet one.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
hetflow="${HETFLOW:-$src/build/bin/hetflow}"
dir="$src/bench/simulate/validate"
REPEAT=${REPEAT:-3}
(( REPEAT >= 1 )) || { echo "REPEAT must be >= 1" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "| config | predicted samples/s | measured samples/s | error | each repeat | cost model (single, dp, ralp; the last repeat) |"
echo "|---|---:|---:|---:|---|---|"
for cfg in ${CONFIGS:-lenet5-single mlp-single lenet5-dp mlp-dp lenet5-hetpipe-1vw lenet5-hetpipe-2vw lenet5-ps lenet5-ralp}; do
  f="$dir/$cfg.toml"
  "$hetflow" profile "$f" > "$tmp/$cfg.profile.txt" 2>&1 || true
  as_run=()
  [[ "$cfg" == *hetpipe* ]] && as_run=(--as-run)  # the waves as the runtime does them (overlapped unless drained)
  pairs=()
  for ((k = 1; k <= REPEAT; k++)); do
    "$hetflow" simulate "$f" --json "${as_run[@]}" > "$tmp/$cfg.$k.sim.json"
    "$hetflow" run "$f" --report "$tmp/$cfg.$k.report.json" > "$tmp/$cfg.$k.run.txt" 2>&1
    pairs+=("$tmp/$cfg.$k.sim.json" "$tmp/$cfg.$k.report.json")
  done
  python3 - "$cfg" "${pairs[@]}" <<'PY'
import json, statistics, sys
cfg, files = sys.argv[1], sys.argv[2:]
def find_epochs(o):
    if isinstance(o, dict):
        if "epochs" in o and isinstance(o["epochs"], list):
            return o["epochs"]
        for v in o.values():
            e = find_epochs(v)
            if e: return e
    return None
preds, meas, note = [], [], ""
for sim, rep in zip(files[0::2], files[1::2]):
    sj = json.load(open(sim))
    p = sj["simulated_samples_per_s"]
    parts = []
    if sj.get("device_step_factor", 1.0) != 1.0:
        parts.append(f"whole step x {sj['device_step_factor']:.2f}")
    if "allreduce_ms" in sj and len(sj.get("replicas", [])) > 1:
        ring = f"all-reduce {sj['allreduce_ms']:.3f} ms ({sj.get('allreduce_model', '')}"
        ring += f"; hand-over {sj['handover_ms']:.3f} ms)" if "handover_ms" in sj else ")"
        parts += [f"at once x {sj.get('step_factor', 1.0):.2f}", ring]
    note = ", ".join(parts)
    r = json.load(open(rep))
    # hetpipe: the run's head simulates its own plan (the profiles it
    # measured, the waves as the runtime does them); a separate `simulate`
    # measures its own profiles and may cut the stages elsewhere.
    if "simulated_samples_per_s" in r:
        p = r["simulated_samples_per_s"]
    # ralp: the server prices the cut it runs with the link it measured
    # at the start (ralp0's predicted_step_ms); a separate `simulate` can
    # only take the profile's (assumed) links.
    for a in r.get("actors", []):
        met = a.get("metrics", {})
        if a.get("name", "").startswith("ralp") and met.get("predicted_step_ms", 0) > 0 and "workers" in met:
            p = met["workers"] * sj["batch"] / met["predicted_step_ms"] * 1000.0
            note = f"run's own prediction: cut {met.get('cut_unit', '?')}, {met['predicted_step_ms']:.3f} ms a step"
    # the last epoch (the first includes start-up and the speed probe);
    # ps and ralp: every worker trains its share of the steps, and the job's
    # rate is the sum of theirs
    workers = [a["metrics"]["epochs"] for a in r.get("actors", [])
               if a.get("name", "").startswith(("psworker", "ralpworker")) and a.get("metrics", {}).get("epochs")]
    if workers:
        m = sum(ep[-1]["samples_per_s"] for ep in workers)
    else:
        ep = find_epochs(r) or []
        m = ep[-1]["samples_per_s"] if ep else float("nan")
    preds.append(p)
    meas.append(m)
p, m = statistics.median(preds), statistics.median(meas)
err = (p - m) / m * 100 if m == m and m > 0 else float("nan")
each = " ".join(f"{(a - b) / b * 100:+.1f}%" if b == b and b > 0 else "nan" for a, b in zip(preds, meas))
print(f"| {cfg} | {p:.0f} | {m:.0f} | {err:+.1f}% | {each} | {note} |")
PY
done
echo
echo "profiles used (hetflow profile):"
cat "$tmp"/*.profile.txt
