#!/usr/bin/env bash
# strategy "hetpipe" with input = "stream" (issues 4 and 7): the stream
# shards feed each virtual worker's stage 0, which the head names once it
# has planned (the assign message), through `hetflow run`:
#  - 2 VWs x 2 stages (allocation np, D = 0, overlapped waves): the same
#    weights as the in-memory run bit for bit (the same batches in the same
#    order), every row used exactly once per epoch per the stage-0 books
#    (each VW's half, and hetpipe.stream: all of them added up);
#    3 shards for 2 VWs: shard 2 feeds VW 0 too, same weights again;
#  - fewer shards than VWs: the run fails at once, saying preprocess_shards
#    (validate already, when the file sets virtual_workers);
#  - strategy = "auto": dp and ralp (memory only) and ps with fewer shards
#    than workers are out; hetpipe is picked and runs streamed;
#  - checkpoints every 15 waves, then --resume of the finished run: the
#    stage 0s take and drop the batches before the checkpoint, the books
#    stay whole and the weights end where the uninterrupted run's did.
source "$(dirname "$0")/lib.sh"

two_devices() {
  sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", index = 0, threads = 1 }, { kind = "cpu", index = 1, threads = 1 } ]/' "$1"
}
common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'test_size = 200' 'batch_size = 32' 'lr = 0.05' 'train_size = 1280' 'epochs = 2' 'strategy = "hetpipe"'
  'allocation = "np"' 'nm = 2' 'staleness = 0' 'eval_each_epoch = false')
run_job() {  # run_job TOPO WHAT [--resume]
  timeout 300 "$HETFLOW" run "$1" --report "$1.json" "${@:3}" >"$1.out" 2>&1 || { tail -40 "$1.out"; fail "$2 failed"; }
}

mem="$HETFLOW_SCRATCH/mem.toml"
write_topology "$mem" 9520 2 auto "${common[@]}"
two_devices "$mem"
run_job "$mem" "in-memory 2-VW run"
for shards in 2 3; do
  st="$HETFLOW_SCRATCH/stream$shards.toml"
  write_topology "$st" $((9530 + 10 * shards)) 2 auto "${common[@]}" 'input = "stream"' "preprocess_shards = $shards"
  two_devices "$st"
  run_job "$st" "streamed 2-VW run ($shards shards)"
  /usr/bin/env python3 - "$mem.json" "$st.json" "$shards" <<'PY' || { tail -30 "$st.out"; fail "streamed hetpipe ($shards shards)"; }
import json, sys
m, s = (json.load(open(f)) for f in sys.argv[1:3])
shards = int(sys.argv[3])
print("weights", m["weights_checksum"], s["weights_checksum"], "test accuracy", m["test_accuracy"], s["test_accuracy"])
assert s["weights_checksum"] == m["weights_checksum"], "the streamed run ends on other weights"
firsts = [x for x in s["hetpipe"]["stages"] if x.get("used") and x["stage"] == 0]
assert len(firsts) == 2, firsts
fed = []
for x in firsts:
    st = x["stream"]
    print("VW", x["vw"], "stream:", {k: st[k] for k in ("shards", "shard_nodes", "batches", "exactly_once")},
          [(e["epoch"], e["rows"]) for e in st["epochs"]])
    assert x["input"] == "stream" and st["exactly_once"] is True, st
    assert [e["rows"] for e in st["epochs"]] == [640, 640], st["epochs"]  # 20 of the epoch's 40 batches of 32
    assert st["batches"] == 40, st
    fed.append(st["shards"])
assert sorted(fed) == sorted([(shards + 1) // 2, shards // 2]), fed
# the stage 0s' books added up: every row of every epoch, once
total = s["hetpipe"]["stream"]
print("all VWs:", total)
assert total["exactly_once"] is True and [e["rows"] for e in total["epochs"]] == [1280, 1280], total
PY
done
pass "input = \"stream\": 2 VWs x 2 stages fed by 2 and by 3 shards end on the in-memory run's weights; every row once per epoch"

# strategy = "auto" with streamed input: dp and ralp (memory only) and ps
# (4 workers, 2 shards) are out; it picks hetpipe and the run streams.
auto="$HETFLOW_SCRATCH/auto.toml"
write_topology "$auto" 9590 2 auto "${common[@]/strategy = \"hetpipe\"/strategy = \"auto\"}" 'input = "stream"' \
  'preprocess_shards = 2'
two_devices "$auto"
"$HETFLOW" plan "$auto" >"$auto.plan" 2>&1 || { cat "$auto.plan"; fail "plan of the auto streamed job"; }
grep -q "dp not possible (input = \"stream\"" "$auto.plan" && grep -q "ralp not possible (input = \"stream\"" "$auto.plan" &&
  grep -q 'ps not possible (\[job\] input = "stream": 2 stream shard(s) for 4 ps workers' "$auto.plan" &&
  grep -q "^auto: chooses hetpipe" "$auto.plan" || { cat "$auto.plan"; fail "auto with streamed input"; }
run_job "$auto" "auto streamed run"
[[ $(json_get "$auto.json" 'd["strategy"] == "hetpipe" and d["hetpipe"]["stream"]["exactly_once"]') == True ]] ||
  { tail -20 "$auto.out"; fail "auto streamed run: not hetpipe, or not exactly once"; }
pass "strategy = \"auto\" with input = \"stream\": dp, ralp and a short-of-shards ps are out; hetpipe runs streamed"

few="$HETFLOW_SCRATCH/few.toml"
write_topology "$few" 9570 2 auto "${common[@]}" 'input = "stream"' 'preprocess_shards = 1'
two_devices "$few"
t0=$SECONDS
if timeout 120 "$HETFLOW" run "$few" >"$few.out" 2>&1; then cat "$few.out"; fail "1 shard for 2 VWs ran"; fi
grep -q "preprocess_shards >= 2" "$few.out" || { tail -20 "$few.out"; fail "no word of preprocess_shards"; }
(( SECONDS - t0 < 60 )) || fail "1 shard for 2 VWs took $((SECONDS - t0)) s to fail"
# With virtual_workers in the file, validate refuses it already.
sed -i 's/^allocation = "np"$/virtual_workers = 2/' "$few"
if "$HETFLOW" validate "$few" >"$few.validate" 2>&1; then cat "$few.validate"; fail "validate passed 1 shard for 2 VWs"; fi
grep -q "preprocess_shards >= 2" "$few.validate" || { cat "$few.validate"; fail "validate: no word of preprocess_shards"; }
pass "input = \"stream\": fewer shards than VWs fails at once, naming preprocess_shards (validate, when virtual_workers is set)"

ck="$HETFLOW_SCRATCH/ck.toml"
write_topology "$ck" 9580 2 auto "${common[@]}" 'input = "stream"' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck\"" \
  'checkpoint_every = 15'
two_devices "$ck"
run_job "$ck" "streamed run with checkpoints"
cp "$ck.json" "$ck.first.json"
run_job "$ck" "--resume of the streamed run" --resume
# (Checkpoint waves are drained boundaries, so these weights differ from the
# run without checkpoints; the resumed run must end where its first run did.)
/usr/bin/env python3 - "$ck.first.json" "$ck.json" <<'PY' || { tail -30 "$ck.out"; fail "streamed hetpipe --resume"; }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
print("resumed at wave", b["resumed_wave"], "weights", a["weights_checksum"], b["weights_checksum"])
assert b["resumed_wave"] == 15, b["resumed_wave"]
assert a["weights_checksum"] == b["weights_checksum"]
for x in b["hetpipe"]["stages"]:
    if x.get("used") and x["stage"] == 0:
        assert x["stream"]["exactly_once"] is True and [e["rows"] for e in x["stream"]["epochs"]] == [640, 640], x["stream"]
PY
pass "input = \"stream\": --resume from wave 15 takes and drops the batches before it and ends on the same weights"
