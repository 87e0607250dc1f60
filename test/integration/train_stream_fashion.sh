#!/usr/bin/env bash
# Slow: deploy/examples/fashion-lenet-stream.toml as shipped -- LeNet-5 on
# Fashion-MNIST for 3 epochs, fed by 2 pre-processing shard nodes with
# augmentation (crop + flip) -- reaches >= 0.86 test accuracy, with every
# training row used exactly once per epoch. About 1 minute on 2 idle cores;
# several minutes on a loaded machine.
source "$(dirname "$0")/lib.sh"

ex="$HETFLOW_SRC/deploy/examples/fashion-lenet-stream.toml"
rep="$HETFLOW_SCRATCH/report.json"
timeout 1500 "$HETFLOW" run "$ex" --report "$rep" >"$HETFLOW_SCRATCH/out" 2>&1 ||
  { tail -30 "$HETFLOW_SCRATCH/out"; fail "the streamed Fashion-MNIST run failed"; }
[[ $(json_get "$rep" 'd["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [60000] * 3') == True ]] ||
  fail "exactly-once books: want 60000 rows in each of 3 epochs"
# Fashion-MNIST's pixels are bytes: each shard keeps them as 8-bit values.
[[ $(json_get "$rep" 'all(a["metrics"]["pixels"] == "u8" and a["metrics"]["dataset_bytes"] == 60000 * 784 for a in d["actors"] if a["name"].startswith("stream_shard_"))') == True ]] ||
  fail "the shards should keep Fashion-MNIST as 8-bit pixels (60000 x 784 bytes)"
acc=$(json_get "$rep" 'd["epochs"][-1]["test_accuracy"]')
python3 -c "import sys; sys.exit(0 if $acc >= 0.86 else 1)" || fail "test accuracy $acc < 0.86"
pass "streamed, augmented LeNet-5: test accuracy $acc after 3 epochs"
