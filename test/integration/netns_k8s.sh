#!/usr/bin/env bash
# The Kubernetes manifest's pods, without Kubernetes: deploy/k8s/hetflow.yaml's
# container script and ConfigMap topology (extracted by
# test/deploy/k8s_check.py, which also checks that the manifest agrees with
# itself) run in three network namespaces standing in for the pods hetflow-0..2,
# each with its own address and an /etc/hosts that gives the headless
# Service's DNS names (hetflow-N.hetflow). As in a pod: POD_NAME,
# HETFLOW_SERVICE and HETFLOW_TOPOLOGY set, `hetflow` on PATH. Only the state
# folder (/var/lib/hetflow, an emptyDir in the pod) is moved to scratch. Every
# node must finish the job (the script prints its exit status and sleeps, as
# in a pod) having listened on its pod's DNS name. Needs root, iproute2 and
# python3-yaml; skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"
python3 -c 'import yaml, tomllib' 2>/dev/null || skip "needs python3 (3.11+) with yaml (python3-yaml)"

manifest=$HETFLOW_SRC/deploy/k8s/hetflow.yaml
python3 "$HETFLOW_SRC/test/deploy/k8s_check.py" "$manifest" topology.toml pod.sh || fail "manifest check"
# The manifest's names: StatefulSet and Service "hetflow", 3 replicas (checked above).
replicas=$(python3 -c "import tomllib; print(len(tomllib.load(open('topology.toml','rb'))['nodes']))")
netns_setup "$replicas"
# Smaller job than the example's, same everything else.
sed -i 's/^tensors = .*/tensors = 16/; s/^tensor_bytes = .*/tensor_bytes = "1MiB"/' topology.toml
hosts=()
for ((i = 0; i < replicas; i++)); do
  hosts+=("${NS_ADDR[$i]} hetflow-$i.hetflow.default.svc.cluster.local hetflow-$i.hetflow")
done
mkdir -p bin
ln -sf "$HETFLOW" bin/hetflow
sed "s#/var/lib/hetflow#$HETFLOW_SCRATCH/state-\$POD_NAME#g" pod.sh >pod-here.sh
pids=()
for ((i = 0; i < replicas; i++)); do
  netns_hosts_file "$i" "${hosts[@]}"
  ip netns exec "${NS_HOSTS[$i]}" env PATH="$HETFLOW_SCRATCH/bin:$PATH" POD_NAME="hetflow-$i" \
    HETFLOW_SERVICE=hetflow HETFLOW_TOPOLOGY="$HETFLOW_SCRATCH/topology.toml" \
    bash pod-here.sh >"pod-$i.log" 2>&1 &
  pids+=($!)
  PIDS+=($!)
done
for ((i = 0; i < replicas; i++)); do
  wait_for_text "pod-$i.log" "exited with status" 120 || { tail -n 20 pod-*.log; fail "pod hetflow-$i: node did not finish"; }
  grep -q "hetflow node hetflow-$i exited with status 0" "pod-$i.log" || { cat "pod-$i.log"; fail "pod hetflow-$i: node failed"; }
  grep -q "listening on hetflow-$i.hetflow:7100" "pod-$i.log" || { cat "pod-$i.log"; fail "pod hetflow-$i did not listen on its DNS name"; }
  kill -0 "${pids[$i]}" 2>/dev/null || fail "pod hetflow-$i's container ended (it must sleep, or the StatefulSet restarts the job)"
done
[[ $(json_get "state-hetflow-0/report.json.job" 'd["result"]["tensors"]') == 16 ]] || fail "head's job report"
pass "the manifest's 3 pods ran the job over their DNS names (hetflow-N.hetflow)"
