#!/usr/bin/env bash
# deploy/k8s/hetflow.yaml: parsed with python3-yaml; StatefulSet, headless
# Service and topology ConfigMap must agree (k8s_check.py); the topology is
# valid for `hetflow validate`; the container's script is valid bash. Then
# broken copies of the manifest (one disagreement each) must be caught.
source "$HETFLOW_SRC/test/integration/lib.sh"
python3 -c 'import yaml, tomllib' 2>/dev/null || { echo "SKIP: needs python3 (3.11+) with yaml (python3-yaml)"; exit 77; }

manifest=$HETFLOW_SRC/deploy/k8s/hetflow.yaml
check=$HETFLOW_SRC/test/deploy/k8s_check.py
python3 "$check" "$manifest" topo.toml pod.sh || fail "the manifest's parts disagree"
"$HETFLOW" validate topo.toml || fail "the ConfigMap's topology is invalid"
bash -n pod.sh || fail "the container's script is not valid bash"
pass "k8s manifest consistent, topology valid, script parses"

# mutate NAME PYTHON: a copy of the manifest changed by PYTHON (docs = the
# documents, cm/svc/sts = them by kind, topo = the ConfigMap's topology text
# as a list of lines, written back) must fail the check.
mutate() {
  local name=$1 code=$2
  python3 - "$manifest" "bad-$name.yaml" <<PY
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
k = {d["kind"]: d for d in docs}
cm, svc, sts = k["ConfigMap"], k["Service"], k["StatefulSet"]
topo = cm["data"]["topology.toml"].split("\n")
$code
cm["data"]["topology.toml"] = "\n".join(topo)
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
  if python3 "$check" "bad-$name.yaml" /dev/null /dev/null >"bad-$name.out" 2>&1; then
    fail "broken manifest '$name' passed the check"
  fi
  grep -q . "bad-$name.out" || fail "broken manifest '$name': no message"
  echo "caught '$name': $(head -1 "bad-$name.out")"
}
mutate replicas 'sts["spec"]["replicas"] = 4'
mutate service-name 'sts["spec"]["serviceName"] = "hetflow-svc"'
mutate not-headless 'del svc["spec"]["clusterIP"]'
mutate selector 'svc["spec"]["selector"] = {"app": "other"}'
mutate node-name 'topo[:] = [l.replace("\"hetflow-1\"", "\"node-1\"") for l in topo]'
mutate node-host 'topo[:] = [l.replace("hetflow-2.hetflow", "hetflow-2.other") for l in topo]'
mutate node-port 'topo[:] = [l.replace("port = 7100", "port = 7200", 1) for l in topo]'
mutate container-port 'sts["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 7101'
mutate configmap-name 'sts["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = "other"'
mutate no-pod-name 'sts["spec"]["template"]["spec"]["containers"][0]["env"].pop(0)'
pass "every broken manifest caught"
