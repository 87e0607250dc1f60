#!/usr/bin/env bash
# Issue 5 acceptance: 2- and 3-process data-parallel training of LeNet-5 on
# Fashion-MNIST reaches the single-device accuracy target (test accuracy
# >= 0.86, as kernels_lenet5_fashion_mnist: 3 epochs, batch 64, SGD momentum,
# lr 0.05, cosine schedule), with every replica ending bit-identical.
source "$(dirname "$0")/lib.sh"

for n in 2 3; do
  topo="$HETFLOW_SCRATCH/dp$n.toml"
  write_topology "$topo" $((8400 + 10 * n)) "$n" auto 'kind = "train"' 'model = "lenet5"' 'epochs = 3' \
    'batch_size = 64' 'lr = 0.05' 'lr_schedule = "cosine"' 'strategy = "dp"' 'ring_timeout = "5s"'
  sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$topo"
  timeout 900 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
    { tail -30 "$topo.out"; fail "$n-replica run failed"; }
  [[ $(json_get "$topo.json" 'd["replicas_identical"]') == True ]] || fail "$n replicas differ"
  acc=$(json_get "$topo.json" 'd["epochs"][-1]["test_accuracy"]')
  sps=$(json_get "$topo.json" 'round(sum(e["samples"] for e in d["epochs"]) / sum(e["train_seconds"] for e in d["epochs"]))')
  /usr/bin/env python3 -c "import sys; sys.exit(0 if $acc >= 0.86 else 1)" ||
    { grep "epoch" "$topo.out"; fail "$n replicas: test accuracy $acc < 0.86"; }
  pass "$n replicas: test accuracy $acc, $sps samples/s, splits $(json_get "$topo.json" '[s["rows"] for s in d["splits"]]')"
done
