#!/usr/bin/env python3
"""Checks deploy/k8s/hetflow.yaml: the StatefulSet, its headless Service and the
topology ConfigMap agree with each other (names, DNS names, ports, replicas,
mounts). Writes the ConfigMap's topology to OUT_TOPOLOGY (for `hetflow
validate`) and the container's shell script to OUT_SCRIPT.

    k8s_check.py MANIFEST OUT_TOPOLOGY OUT_SCRIPT

Exit 0 when everything agrees; otherwise prints every problem and exits 1.
"""
import sys
import tomllib

import yaml

manifest, out_topology, out_script = sys.argv[1:4]
problems = []


def check(cond, msg):
    if not cond:
        problems.append(msg)
    return cond


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
by_kind = {}
for d in docs:
    check(isinstance(d, dict) and "kind" in d and "apiVersion" in d, f"document without kind/apiVersion: {d!r:.80}")
    by_kind.setdefault(d.get("kind"), []).append(d)
for kind in ("ConfigMap", "Service", "StatefulSet"):
    check(len(by_kind.get(kind, [])) == 1, f"want exactly one {kind}, found {len(by_kind.get(kind, []))}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
cm, svc, sts = by_kind["ConfigMap"][0], by_kind["Service"][0], by_kind["StatefulSet"][0]
check(sts["apiVersion"] == "apps/v1", "StatefulSet apiVersion must be apps/v1")

# --- the Service: headless, selects the StatefulSet's pods ---------------------------
s = svc["spec"]
svc_name = svc["metadata"]["name"]
check(s.get("clusterIP") == "None", "Service must be headless (clusterIP: None)")
check(s.get("publishNotReadyAddresses") is True,
      "Service must publish not-ready pods (nodes resolve each other before they are ready)")
pod_labels = sts["spec"]["template"]["metadata"]["labels"]
check(subset(s.get("selector"), pod_labels), "Service selector does not select the StatefulSet's pods")

# --- the StatefulSet ---------------------------------------------------------------------
ss = sts["spec"]
sts_name = sts["metadata"]["name"]
check(ss.get("serviceName") == svc_name, f"serviceName {ss.get('serviceName')!r} != Service {svc_name!r}")
check(subset(ss["selector"]["matchLabels"], pod_labels), "selector.matchLabels do not match the pod labels")
check(ss.get("podManagementPolicy") == "Parallel", "pods must start together (podManagementPolicy: Parallel)")
replicas = ss.get("replicas", 1)
pod = ss["template"]["spec"]
containers = pod["containers"]
check(len(containers) == 1, "want one container")
c = containers[0]
env = {e["name"]: e for e in c.get("env", [])}
check(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
      "POD_NAME must come from metadata.name (the node's name)")
check(env.get("HETFLOW_SERVICE", {}).get("value") == svc_name, "HETFLOW_SERVICE must be the Service's name")
topo_path = env.get("HETFLOW_TOPOLOGY", {}).get("value", "")
ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
check(c.get("command", [None])[0] in ("/bin/bash", "bash"), "the container runs its script with bash")
script = "\n".join(c.get("args", []))
check("hetflow node \"$HETFLOW_TOPOLOGY\" --name \"$POD_NAME\"" in script,
      "the script must run `hetflow node \"$HETFLOW_TOPOLOGY\" --name \"$POD_NAME\"`")
check('getent hosts "$POD_NAME.$HETFLOW_SERVICE"' in script, "the script must wait for its own DNS name")
open(out_script, "w").write(script)

# The topology file: a ConfigMap key mounted at HETFLOW_TOPOLOGY.
volumes = {v["name"]: v for v in pod.get("volumes", [])}
mounted = None
for m in c.get("volumeMounts", []):
    v = volumes.get(m["name"])
    check(v is not None, f"volumeMount {m['name']!r} has no volume")
    if v and "configMap" in v and topo_path.startswith(m["mountPath"].rstrip("/") + "/"):
        mounted = (v["configMap"]["name"], topo_path[len(m["mountPath"].rstrip("/")) + 1:])
check(mounted is not None, f"HETFLOW_TOPOLOGY {topo_path!r} is not in a mounted ConfigMap")
if mounted:
    check(mounted[0] == cm["metadata"]["name"], f"mounted ConfigMap {mounted[0]!r} is not {cm['metadata']['name']!r}")
    check(mounted[1] in cm.get("data", {}), f"ConfigMap has no key {mounted[1]!r}")
    text = cm["data"].get(mounted[1], "")
    open(out_topology, "w").write(text)
    topo = tomllib.loads(text)
    nodes = topo.get("nodes", [])
    check(len(nodes) == replicas, f"{len(nodes)} nodes in the topology but {replicas} replicas")
    svc_ports = {p.get("name"): p for p in s.get("ports", [])}
    for i, n in enumerate(nodes):
        want = f"{sts_name}-{i}"
        check(n["name"] == want, f"node {i} is named {n['name']!r}; pod {i} is {want!r}")
        check(n["host"] in (f"{want}.{svc_name}", f"{want}.{svc_name}.svc.cluster.local")
              or n["host"].startswith(f"{want}.{svc_name}."),
              f"node {n['name']!r} host {n['host']!r} is not the pod's DNS name {want}.{svc_name}")
        check(n["port"] in ports.values(), f"node {n['name']!r} port {n['port']} is not a containerPort {ports}")
        check(any(p["port"] == n["port"] for p in svc_ports.values()),
              f"node {n['name']!r} port {n['port']} is not a Service port")
    for p in svc_ports.values():
        tp = p.get("targetPort", p["port"])
        check(tp in ports or tp in ports.values(), f"Service targetPort {tp!r} is no container port")
    check(topo.get("cluster", {}).get("ucx_tls", "") != "" or topo.get("cluster", {}).get("data_plane") == "caf",
          "pods do not share memory: set ucx_tls (e.g. \"tcp,self\") or data_plane = \"caf\"")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"ok: {len(docs)} documents, StatefulSet {sts_name!r} x{replicas}, Service {svc_name!r}, "
      f"topology {mounted[0]}/{mounted[1]}")
