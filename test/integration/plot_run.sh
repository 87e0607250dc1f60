#!/usr/bin/env bash
# `hetflow run --plot` and `hetflow plot` (issue 8): a small train job's SVG
# (three panels, one polyline point per data point, valid XML), the same SVG
# from its --report, nothing written (and the run's exit status unchanged)
# for a preprocess job and a failed train job, clear errors for bad reports.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH

# check_svg SVG REPORT|- EPOCHS: parses SVG as XML and checks its structure;
# with a REPORT, the history polylines have one point per history row (none
# when the report has no history).
check_svg() {
  python3 - "$@" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
svg, report, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(svg).getroot()  # raises on malformed XML
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
panels = [g.get("id") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "panel"]
assert panels == ["panel-loss", "panel-accuracy", "panel-throughput"], panels
lines = {p.get("data-series"): p.get("points").split() for p in root.iter("{http://www.w3.org/2000/svg}polyline")}
for s in ("loss-epoch", "train-accuracy", "test-accuracy", "throughput-epoch"):
    assert len(lines.get(s, [])) == epochs, (s, lines.get(s))
history = json.load(open(report)).get("history", []) if report != "-" else None
for s in ("loss-history", "throughput-history"):
    if history is not None:
        assert len(lines.get(s, [])) == len(history), (s, len(lines.get(s, [])), len(history))
w, h = (float(v) for v in root.get("viewBox").split()[2:])
for s, pts in lines.items():
    for p in pts:
        x, y = (float(v) for v in p.split(","))
        assert 0 <= x <= w and 0 <= y <= h, (s, p)
text = "".join(root.itertext())
for want in ("(a) training loss", "(b) accuracy per epoch", "(c) throughput", "seconds since training started",
             "samples/s", "test accuracy", "cluster it-train", "model mlp on cpu"):
    assert want in text, want
print("svg ok")
EOF
}

topo="$S/train.toml"
write_topology "$topo" 9610 1 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 2048' 'test_size = 256' 'classes = 5' 'epochs = 3' \
  'batch_size = 32' 'lr = 0.02'

# --plot without --report: the launcher still reads the head's job report.
timeout 120 "$HETFLOW" run "$topo" --plot "$S/a.svg" >"$S/a.out" 2>&1 || { cat "$S/a.out"; fail "train run with --plot"; }
grep -q "hetflow run: plot written to $S/a.svg (3 epochs" "$S/a.out" || { cat "$S/a.out"; fail "no 'plot written' line"; }
[[ -s "$S/a.svg" ]] || fail "--plot wrote no file"
check_svg "$S/a.svg" - 3 || fail "a.svg structure"
pass "run --plot without --report writes an SVG with three panels"

# --report and --plot; `hetflow plot` on that report gives the same bytes.
timeout 120 "$HETFLOW" run "$topo" --report "$S/b.json" --plot "$S/b.svg" >"$S/b.out" 2>&1 ||
  { cat "$S/b.out"; fail "train run with --report --plot"; }
check_svg "$S/b.svg" "$S/b.json" 3 || fail "b.svg structure"
"$HETFLOW" plot "$S/b.json" --out "$S/c.svg" >"$S/c.out" 2>&1 || { cat "$S/c.out"; fail "hetflow plot"; }
grep -q "hetflow plot: wrote $S/c.svg (3 epochs" "$S/c.out" || { cat "$S/c.out"; fail "hetflow plot: no 'wrote' line"; }
cmp -s "$S/b.svg" "$S/c.svg" || fail "hetflow plot on the run's report differs from run --plot"
pass "hetflow plot REPORT == run --plot ($(json_get "$S/b.json" 'len(d.get("history", []))') history points)"

# A preprocess job: no plot, one line why, exit status 0 as without --plot.
"$HETFLOW" gen-criteo --rows 2000 --out "$S/in.tsv" >/dev/null 2>&1 || fail "gen-criteo"
write_topology "$S/pre.toml" 9620 1 auto 'kind = "preprocess"' "inputs = [\"$S/in.tsv\"]" \
  "output_dir = \"$S/pre-out\"" 'categorical = "hash"' 'hash_range = 1000'
timeout 120 "$HETFLOW" run "$S/pre.toml" --plot "$S/pre.svg" --report "$S/pre.json" >"$S/pre.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { cat "$S/pre.out"; fail "preprocess with --plot: exit $rc, want 0"; }
[[ ! -e "$S/pre.svg" ]] || fail "preprocess job: a plot was written"
[[ $(grep -c "no plot written to $S/pre.svg: a 'preprocess' job; only train jobs" "$S/pre.out") -eq 1 ]] ||
  { cat "$S/pre.out"; fail "preprocess job: no one-line reason"; }
pass "preprocess job: no plot, one line says why, exit 0"

# A failed train job (a stream shard duplicates a row: the exactly-once check
# fails the job at its first step): exit 1 as without --plot, no file.
write_topology "$S/bad.toml" 9630 1 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 512' 'test_size = 64' 'classes = 5' 'epochs = 1' \
  'input = "stream"' 'stream_fault = "duplicate"'
timeout 120 "$HETFLOW" run "$S/bad.toml" --plot "$S/bad.svg" >"$S/bad.out" 2>&1
rc=$?
[[ $rc -eq 1 ]] || { cat "$S/bad.out"; fail "failed train job with --plot: exit $rc, want 1"; }
[[ ! -e "$S/bad.svg" ]] || fail "failed train job: a plot was written"
grep -q "no plot written to $S/bad.svg: the train job failed" "$S/bad.out" ||
  { cat "$S/bad.out"; fail "failed train job: no reason"; }
pass "failed train job: no plot, exit 1 unchanged"

# Bad reports and paths: exit 2 with a message naming the problem.
expect_2() {  # expect_2 TEXT ARGS...: hetflow ARGS exits 2 and prints TEXT
  local text=$1
  shift
  "$HETFLOW" "$@" >"$S/err.out" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -qF -- "$text" "$S/err.out" || { cat "$S/err.out"; fail "hetflow $*: exit $rc, want 2 and '$text'"; }
}
echo '{"job": "train", "status": ' >"$S/broken.json"
expect_2 "$S/broken.json: not valid JSON" plot "$S/broken.json" --out "$S/x.svg"
expect_2 "cannot read $S/missing.json (no such file)" plot "$S/missing.json" --out "$S/x.svg"
expect_2 "a 'preprocess' job; only train jobs" plot "$S/pre.json" --out "$S/x.svg"
expect_2 "missing --out PATH" plot "$S/b.json"
expect_2 "--plot writes SVG only" run "$topo" --plot "$S/x.png"
expect_2 "does not exist" plot "$S/b.json" --out "$S/no/such/dir/x.svg"
[[ ! -e "$S/x.svg" && ! -e "$S/x.png" ]] || fail "an error wrote a file"
pass "bad reports and paths: exit 2 with a clear message"
