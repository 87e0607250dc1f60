#!/usr/bin/env bash
# Plugins (issue 8): the example plugin (plugins/example) loaded by validate,
# plan and every node of a `hetflow run`, its job kind and its actor type in
# [[actors]] next to the built-in producer and checker, a wrong transform
# caught by the checker; and the start-up / validate errors for bad plugins
# (test/plugins): FILE:LINE:COL at the plugins element, exit 2.
source "$(dirname "$0")/lib.sh"

lib="$(cd "$(dirname "$HETFLOW")/../lib" && pwd)" || fail "no lib/ beside $(dirname "$HETFLOW")"
example="$lib/libhetflow_example_plugin.so"
[[ -f $example ]] || fail "example plugin not built: $example"
tplug="$lib"  # test/plugins/ builds into the same lib/
for v in abi_mismatch dup_builtin no_entry; do
  [[ -f $tplug/libhetflow_test_plugin_$v.so ]] || fail "test plugin $v not built in $tplug"
done

# The topology names the plugin relative to its own folder.
mkdir -p "$HETFLOW_SCRATCH/topo"
rel=$(realpath --relative-to="$HETFLOW_SCRATCH/topo" "$example")

# write_plugin_topology FILE BASE_PORT NODES PLUGIN_LIST [job and actor lines...]
write_plugin_topology() {
  local file=$1 base=$2 nodes=$3 plugins=$4 i
  shift 4
  {
    echo '[cluster]'
    echo "name = \"it-$(basename "$file" .toml)\""
    echo "plugins = [$plugins]"
    echo 'join_timeout = "20s"'
    for ((i = 0; i < nodes; i++)); do
      printf '[[nodes]]\nname = "n%d"\nhost = "127.0.0.1"\nport = %d\n' $i $((base + i))
    done
    local l
    for l in "$@"; do echo "$l"; done
  } >"$file"
}

# --- the plugin's job kind on 4 nodes: validate, plan, run -------------------
topo="$HETFLOW_SCRATCH/topo/pipeline.toml"
write_plugin_topology "$topo" 9410 4 "\"$rel\"" '[job]' 'kind = "affine_pipeline"' 'tensors = 24' \
  'tensor_bytes = "256KiB"' 'window = 3'
out=$("$HETFLOW" validate "$topo" 2>&1) || { echo "$out"; fail "validate with the example plugin"; }
grep -q "plugin 'example-affine' (.*libhetflow_example_plugin.so): actor types affine; job kinds affine_pipeline" \
  <<<"$out" || { echo "$out"; fail "validate does not list the plugin's types"; }
grep -q ": ok (cluster 'it-pipeline', 4 nodes, job 'affine_pipeline')" <<<"$out" || { echo "$out"; fail "validate ok line"; }
pass "validate loads the plugin and accepts its job kind"

"$HETFLOW" plan "$topo" --json >"$topo.plan" 2>&1 || { cat "$topo.plan"; fail "plan"; }
[[ $(json_get "$topo.plan" '[(a["name"], a["type"], a["node"]) for a in d["actors"] if a["type"] == "affine"]') == \
  "[('double', 'affine', 'n1'), ('increment', 'affine', 'n2')]" ]] || { cat "$topo.plan"; fail "plan: affine actors"; }
pass "plan places the plugin's actors"

timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { cat "$topo.out"; fail "hetflow run of the plugin's job exited $rc"; }
[[ $(json_get "$topo.json" 'd["status"]') == ok ]] || fail "report status"
[[ $(json_get "$topo.json" 'd["result"]["tensors"]') == 24 ]] || fail "checker did not check 24 tensors"
[[ $(json_get "$topo.json" 'd["result"]["bytes"]') == $((24 * 262144)) ]] || fail "bytes checked"
# Each affine ran on its own node process (the node loaded the plugin itself).
for a in "double n1 2.000000x + 0.000000" "increment n2 1.000000x + 1.000000"; do
  set -- $a
  [[ $(json_get "$topo.json" "[x['node'] + ': ' + x['summary'] for x in d['actors'] if x['name'] == '$1'][0]") == \
    "$2: applied y = $3 $4 $5 to 24 tensors" ]] || { cat "$topo.json"; fail "actor $1 on $2"; }
done
sent=$(json_get "$topo.json" 'sum(n["data_plane_stats"]["bytes_sent"] for n in d["nodes"])')
((sent >= 3 * 24 * 262144)) || fail "tensors did not cross the data plane between the 4 nodes ($sent bytes)"
pass "hetflow run: producer -> affine -> affine -> checker on 4 processes, every tensor correct"

# --- the plugin's actor type in [[actors]] of the built-in skeleton job -------
actors_of() {  # actors_of SCALE: producer n0 -> affine(SCALE, +1) n1 -> checker n2
  printf '%s\n' '[job]' 'kind = "skeleton"' 'tensors = 12' 'tensor_bytes = "64KiB"' \
    '[[actors]]' 'name = "producer"' 'type = "producer"' 'node = "n0"' 'args = { to = "aff" }' \
    '[[actors]]' 'name = "aff"' 'type = "affine"' 'node = "n1"' "args = { scale = $1, shift = 1.0 }" \
    '[[actors]]' 'name = "checker"' 'type = "checker"' 'node = "n2"'
}
topo="$HETFLOW_SCRATCH/topo/skel.toml"
mapfile -t lines < <(actors_of 2.0)
write_plugin_topology "$topo" 9420 3 "\"$rel\"" "${lines[@]}"
timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
  { cat "$topo.out"; fail "skeleton job with an affine actor"; }
[[ $(json_get "$topo.json" 'd["result"]["tensors"]') == 12 ]] || fail "skeleton+affine: tensors checked"
pass "the plugin's actor type in [[actors]] between the built-in producer and checker"

# The same with a wrong transform: the checker must catch it (exit 1).
topo="$HETFLOW_SCRATCH/topo/skel-wrong.toml"
mapfile -t lines < <(actors_of 3.0)
write_plugin_topology "$topo" 9430 3 "\"$rel\"" "${lines[@]}"
timeout 120 "$HETFLOW" run "$topo" >"$topo.out" 2>&1
rc=$?
[[ $rc -eq 1 ]] || { cat "$topo.out"; fail "a wrong affine transform exited $rc, want 1"; }
grep -q "tensor 0 element 0: got" "$topo.out" || { cat "$topo.out"; fail "checker's message for a wrong transform"; }
pass "a wrong transform fails the job (checker names the element)"

# An unknown arg of the plugin's type is checked like a built-in's.
topo="$HETFLOW_SCRATCH/topo/badarg.toml"
mapfile -t lines < <(actors_of '2.0, shfit = 1.0')
write_plugin_topology "$topo" 9440 3 "\"$rel\"" "${lines[@]}"
out=$("$HETFLOW" validate "$topo" 2>&1)
[[ $? -eq 2 ]] || { echo "$out"; fail "validate with an unknown affine arg"; }
grep -q "did you mean 'shift'" <<<"$out" || { echo "$out"; fail "no suggestion for an unknown affine arg"; }
pass "the plugin's keys are checked with suggestions"

# Without the plugin the same names are unknown.
topo="$HETFLOW_SCRATCH/topo/noplugin.toml"
write_plugin_topology "$topo" 9450 2 "" '[job]' 'kind = "affine_pipeline"'
out=$("$HETFLOW" validate "$topo" 2>&1)
[[ $? -eq 2 ]] && grep -q "affine_pipeline" <<<"$out" || { echo "$out"; fail "job kind known without its plugin"; }
pass "without the plugin its job kind is unknown"

# --- the plugin's image transform in a streamed train job ----------------------
# cutout sets a size x size square of every sample to 0 at a place drawn from
# (seed, epoch, row). size = 28 erases whole 28x28 images: training cannot get
# above chance, which shows it reached every sample; size = 8 changes the
# losses, and 1 shard trains exactly what 2 shards do (a transform depends on
# the row, not on the shard).
train_topo() {  # train_topo FILE PORT NODES [job lines...]: LeNet-5 on a synthetic set, with the plugin
  local f=$1 p=$2 n=$3
  shift 3
  write_plugin_topology "$f" "$p" "$n" "\"$rel\"" '[job]' 'kind = "train"' 'model = "lenet5"' \
    'dataset = "synthetic"' 'input_shape = [1, 28, 28]' 'train_size = 2000' 'test_size = 400' 'batch_size = 64' \
    'seed = 3' "$@"
}
tf_topo() { train_topo "$1" "$2" "$3" 'epochs = 2' 'input = "stream"' "${@:4}"; }
tf_run() {  # tf_run FILE: runs it, checks ok, prints the per-epoch losses
  timeout 120 "$HETFLOW" run "$1" --report "$1.json" >"$1.out" 2>&1 || { cat "$1.out"; fail "streamed run $1"; }
  json_get "$1.json" '[e["loss"] for e in d["epochs"]]'
}
t_none="$HETFLOW_SCRATCH/topo/tf-none.toml"
t_all="$HETFLOW_SCRATCH/topo/tf-all.toml"
t_cut2="$HETFLOW_SCRATCH/topo/tf-cut2.toml"
t_cut1="$HETFLOW_SCRATCH/topo/tf-cut1.toml"
tf_topo "$t_none" 9900 2
tf_topo "$t_all" 9910 2 'transforms = ["cutout"]' 'cutout = { size = 28 }'
tf_topo "$t_cut2" 9920 2 'transforms = ["cutout"]' 'cutout = { size = 8 }'
tf_topo "$t_cut1" 9930 2 'transforms = ["cutout"]' 'cutout = { size = 8 }' 'preprocess_shards = 1'
out=$("$HETFLOW" validate "$t_cut2" 2>&1) || { echo "$out"; fail "validate a streamed job with cutout"; }
# The example topology (plugins/example/cutout.toml) names the plugin in the default build folder.
if [[ $example -ef "$(dirname "$0")/../../build/lib/libhetflow_example_plugin.so" ]]; then
  "$HETFLOW" validate "$(dirname "$0")/../../plugins/example/cutout.toml" >/dev/null ||
    fail "validate plugins/example/cutout.toml"
fi
grep -q "plugin 'example-affine' .*; transforms cutout" <<<"$out" || { echo "$out"; fail "validate lists the transform"; }
l_none=$(tf_run "$t_none")
l_all=$(tf_run "$t_all")
l_cut2=$(tf_run "$t_cut2")
l_cut1=$(tf_run "$t_cut1")
a_none=$(json_get "$t_none.json" 'd["epochs"][-1]["test_accuracy"]')
a_all=$(json_get "$t_all.json" 'd["epochs"][-1]["test_accuracy"]')
[[ $(json_get "$t_none.json" 'd["epochs"][-1]["test_accuracy"] > 0.6') == True ]] ||
  fail "without transforms the synthetic set should train (accuracy $a_none)"
[[ $(json_get "$t_all.json" 'd["epochs"][-1]["test_accuracy"] < 0.25 and d["epochs"][-1]["loss"] > 2.0') == True ]] ||
  { cat "$t_all.json"; fail "cutout of whole images still trained (accuracy $a_all): not applied to every sample?"; }
[[ $(json_get "$t_all.json" '[(a["metrics"]["transforms"], a["metrics"]["transformed_samples"]) for a in d["actors"] if a["name"].startswith("stream_shard_")]') == \
  "[(['cutout'], 2048), (['cutout'], 1952)]" ]] || { cat "$t_all.json"; fail "shards' transform books"; }
grep -q "actor 'stream_shard_1' finished: .*, transforms cutout" "$t_all.out" || { cat "$t_all.out"; fail "shard summary"; }
[[ $l_cut2 != "$l_none" ]] || fail "cutout size 8 left the losses unchanged ($l_cut2)"
[[ $l_cut1 == "$l_cut2" ]] || fail "cutout: 1 shard trained $l_cut1, 2 shards $l_cut2 (must be equal)"
pass "transform cutout in streamed training: whole-image cutout -> accuracy $a_all (none: $a_none); size 8 changes the losses; 1 shard == 2 shards ($l_cut2)"

# Its errors: an unknown transform, a bad key, a job without stream shards.
tf_refused() {  # tf_refused WANT FILE
  out=$("$HETFLOW" validate "$2" 2>&1)
  [[ $? -eq 2 ]] && grep -qF -- "$1" <<<"$out" || { echo "$out"; fail "validate $(basename "$2"): want '$1'"; }
}
t="$HETFLOW_SCRATCH/topo/tf-bad1.toml"
tf_topo "$t" 9940 2 'transforms = ["cutuot"]'
tf_refused "[job] transforms: unknown transform 'cutuot' (registered: cutout;" "$t"
t="$HETFLOW_SCRATCH/topo/tf-bad2.toml"
tf_topo "$t" 9940 2 'transforms = ["cutout"]' 'cutout = { size = 0 }'
tf_refused "cutout.size" "$t"
t="$HETFLOW_SCRATCH/topo/tf-bad3.toml"
write_plugin_topology "$t" 9940 1 "\"$rel\"" '[job]' 'kind = "train"' 'dataset = "synthetic"' \
  'transforms = ["cutout"]'
tf_refused '[job] transforms run in the stream shards: set input = "stream"' "$t"
t="$HETFLOW_SCRATCH/topo/tf-bad4.toml"
write_plugin_topology "$t" 9940 1 "" '[job]' 'kind = "train"' 'dataset = "synthetic"' 'input = "stream"' \
  'transforms = ["cutout"]'
tf_refused "unknown transform 'cutout' (none is registered;" "$t"
pass "transform errors at validate: unknown name, bad key, no stream shards, no plugin"

# --- the plugin's layer in a train job ---------------------------------------
# channel_affine (y = x * scale[c] + shift[c], learnable, identity at the
# start) inserted after fc1: validate lists it; single-device training
# reaches the accuracy of the plain model (same seed; its 240 parameters are
# in the model); data parallelism over 2 processes sums its gradients in the
# ring like the others (both replicas end on the same weights); and the
# errors (unknown layer, unknown unit, not AFTER:TYPE, no plugin) at validate.
ly_topo() { train_topo "$1" "$2" "$3" 'epochs = 3' 'lr = 0.02' "${@:4}"; }
ly_run() {  # ly_run FILE: runs it, checks ok, prints the last test accuracy
  timeout 180 "$HETFLOW" run "$1" --report "$1.json" >"$1.out" 2>&1 || { cat "$1.out"; fail "run $1"; }
  json_get "$1.json" 'd["epochs"][-1]["test_accuracy"] if d["epochs"][-1].get("test_accuracy") is not None else d.get("test_accuracy")'
}
t_plain="$HETFLOW_SCRATCH/topo/ly-plain.toml"
t_aff="$HETFLOW_SCRATCH/topo/ly-affine.toml"
t_dp="$HETFLOW_SCRATCH/topo/ly-dp.toml"
ly_topo "$t_plain" 9950 1
ly_topo "$t_aff" 9955 1 'insert_layers = ["fc1:channel_affine"]'
ly_topo "$t_dp" 9960 2 'insert_layers = ["fc1:channel_affine"]' 'strategy = "dp"' 'dp_split = "equal"'
out=$("$HETFLOW" validate "$t_aff" 2>&1) || { echo "$out"; fail "validate a job with insert_layers"; }
grep -q "plugin 'example-affine' .*; layers channel_affine" <<<"$out" || { echo "$out"; fail "validate lists the layer"; }
a_plain=$(ly_run "$t_plain")
a_aff=$(ly_run "$t_aff")
p_plain=$(json_get "$t_plain.json" 'd["parameters"]')
p_aff=$(json_get "$t_aff.json" 'd["parameters"]')
((p_aff == p_plain + 240)) || fail "with channel_affine after fc1 the model has $p_aff parameters, want $p_plain + 240"
[[ $(json_get "$t_aff.json" 'd["epochs"][-1]["test_accuracy"] > 0.85') == True ]] ||
  { cat "$t_aff.json"; fail "lenet5 with channel_affine did not train (accuracy $a_aff; plain $a_plain)"; }
[[ $(json_get "$t_aff.json" 'd["epochs"][0]["loss"]') != $(json_get "$t_plain.json" 'd["epochs"][0]["loss"]') ]] ||
  fail "channel_affine changed nothing in training (its parameters never trained?)"
a_dp=$(ly_run "$t_dp")
[[ $(json_get "$t_dp.json" 'd["epochs"][-1]["test_accuracy"] > 0.85') == True ]] ||
  { cat "$t_dp.json"; fail "dp with channel_affine did not train (accuracy $a_dp)"; }
[[ $(json_get "$t_dp.json" 'd["replicas_identical"]') == True ]] ||
  { cat "$t_dp.json"; fail "dp replicas with channel_affine ended on different weights"; }
# HetPipe: 1 VW of 2 stages, Nm = 1, one thread per device, trains exactly
# what one device trains (as it_train_hetpipe checks without the layer):
# the plugin's unit forwards, backwards and updates inside a pipeline stage.
one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }
t_s1="$HETFLOW_SCRATCH/topo/ly-single1.toml"
t_hp="$HETFLOW_SCRATCH/topo/ly-hetpipe.toml"
ly_topo "$t_s1" 9970 1 'insert_layers = ["conv1:channel_affine", "fc1:channel_affine"]'
ly_topo "$t_hp" 9975 2 'insert_layers = ["conv1:channel_affine", "fc1:channel_affine"]' 'strategy = "hetpipe"' \
  'virtual_workers = 1' 'nm = 1'
one_thread "$t_s1"
one_thread "$t_hp"
a_s1=$(ly_run "$t_s1")
a_hp=$(ly_run "$t_hp")
c_s1=$(json_get "$t_s1.json" 'd["weights_checksum"]')
c_hp=$(json_get "$t_hp.json" 'd["weights_checksum"]')
[[ $c_s1 == "$c_hp" ]] || { cat "$t_hp.out"; fail "hetpipe with channel_affine: weights $c_hp, single device $c_s1"; }
pass "the plugin's layer trains: single $a_aff (plain $a_plain, +240 parameters), dp over 2 processes $a_dp, replicas identical; hetpipe 2 stages == single device ($a_hp, weights $c_hp)"
# Keys: "fc1:channel_affine(scale=1, shift=0)" are its defaults (the same
# weights as without keys); another initial scale trains other weights.
t_k1="$HETFLOW_SCRATCH/topo/ly-keys1.toml"
t_k2="$HETFLOW_SCRATCH/topo/ly-keys2.toml"
ly_topo "$t_k1" 9980 1 'insert_layers = ["conv1:channel_affine", "fc1:channel_affine(scale=1, shift=0)"]'
ly_topo "$t_k2" 9985 1 'insert_layers = ["conv1:channel_affine", "fc1:channel_affine(scale = 0.5)"]'
one_thread "$t_k1"
one_thread "$t_k2"
ly_run "$t_k1" >/dev/null
ly_run "$t_k2" >/dev/null
[[ $(json_get "$t_k1.json" 'd["weights_checksum"]') == "$c_s1" ]] || fail "channel_affine(scale=1, shift=0) trained other weights than the defaults"
[[ $(json_get "$t_k2.json" 'd["weights_checksum"]') != "$c_s1" ]] || fail "channel_affine(scale = 0.5) trained the default's weights"
pass "layer keys: channel_affine(scale=1, shift=0) == the defaults (weights $c_s1); scale = 0.5 trains others"
t="$HETFLOW_SCRATCH/topo/ly-bad.toml"
ly_topo "$t" 9965 1 'insert_layers = ["fc1:channel_afine"]'
tf_refused "no plugin registered layer 'channel_afine' (registered: channel_affine;" "$t"
ly_topo "$t" 9965 1 'insert_layers = ["fc9:channel_affine"]'
tf_refused "lenet5 has no unit 'fc9' (its units: conv1," "$t"
ly_topo "$t" 9965 1 'insert_layers = ["channel_affine"]'
tf_refused "'channel_affine' is not \"AFTER:TYPE\"" "$t"
ly_topo "$t" 9965 1 'insert_layers = ["fc1:channel_affine(scal=2)"]'
tf_refused "layer 'channel_affine' takes no key 'scal' (its keys: scale, shift)" "$t"
ly_topo "$t" 9965 1 'insert_layers = ["fc1:channel_affine(scale=2"]'
tf_refused "unbalanced parentheses" "$t"
ly_topo "$t" 9965 1 'insert_layers = ["fc1:channel_affine(scale)"]'
tf_refused "'scale' is not key=value" "$t"
ly_topo "$t" 9965 1 'insert_layers = ["fc1:channel_affine(scale=big)"]'
timeout 60 "$HETFLOW" run "$t" >"$t.out" 2>&1 && { cat "$t.out"; fail "channel_affine(scale=big) ran"; }
grep -q "unit fc1_channel_affine: scale = 'big' is not a number" "$t.out" || { cat "$t.out"; fail "scale=big: the error"; }
write_plugin_topology "$t" 9965 1 "" '[job]' 'kind = "train"' 'dataset = "synthetic"' \
  'insert_layers = ["fc1:channel_affine"]'
tf_refused "no plugin registered layer 'channel_affine' (registered: none;" "$t"
pass "layer errors at validate: unknown layer, unknown unit, not AFTER:TYPE, unknown key, bad key syntax, no plugin; a value the plugin cannot parse stops the run"

# --- bad plugins: clear errors at validate and at start-up, exit 2 ------------
# Longer than an ELF header (shorter files give "file too short").
head -c 300 /dev/zero | tr '\0' x >"$HETFLOW_SCRATCH/topo/libjunk.so"
echo " not a shared library" >>"$HETFLOW_SCRATCH/topo/libjunk.so"
check_refused() {  # check_refused CMD... : exit 2 and the message at line 3, column 12
  local want=$1 topo=$2
  shift 2
  out=$(timeout 30 "$HETFLOW" "$@" 2>&1)
  local rc=$?
  [[ $rc -eq 2 ]] || { echo "$out"; fail "'hetflow $*' exited $rc, want 2"; }
  grep -qF "$topo:3:12: error: plugin '" <<<"$out" || { echo "$out"; fail "'hetflow $*': no FILE:3:12 diagnostic"; }
  grep -qF -- "$want" <<<"$out" || { echo "$out"; fail "'hetflow $*': want '$want'"; }
  ! grep -q "^\[n[0-9]\]" <<<"$out" || { echo "$out"; fail "'hetflow $*' started nodes"; }
}
port=9460
for case in "libjunk.so|cannot be loaded: |invalid ELF header" \
  "$tplug/libhetflow_test_plugin_no_entry.so|has no entry point 'hetflow_plugin'|" \
  "$tplug/libhetflow_test_plugin_abi_mismatch.so|built for plugin ABI version 5, but this hetflow has 4|" \
  "$tplug/libhetflow_test_plugin_dup_builtin.so|actor type 'producer' is already registered by hetflow (built-in)|"; do
  IFS='|' read -r plug want want2 <<<"$case"
  topo="$HETFLOW_SCRATCH/topo/bad-$port.toml"
  write_plugin_topology "$topo" $port 2 "\"$plug\"" '[job]' 'kind = "skeleton"' 'tensors = 2'
  port=$((port + 10))
  check_refused "$want" "$topo" validate "$topo"
  [[ -z $want2 ]] || grep -qF -- "$want2" <<<"$out" || { echo "$out"; fail "validate: want '$want2'"; }
  check_refused "$want" "$topo" run "$topo"
  check_refused "$want" "$topo" node "$topo" --name n1
  check_refused "$want" "$topo" plan "$topo"
  pass "refused at validate, run, node and plan: $(basename "$plug") ($want)"
done

# The good plugin next to a duplicate of its own type.
topo="$HETFLOW_SCRATCH/topo/twice.toml"
write_plugin_topology "$topo" 9510 2 "\"$rel\", \"$rel\"" '[job]' 'kind = "skeleton"'
out=$("$HETFLOW" validate "$topo" 2>&1)
[[ $? -eq 2 ]] && grep -q "is listed twice (also at line 3)" <<<"$out" || { echo "$out"; fail "plugin listed twice"; }
pass "a plugin listed twice is an error"
