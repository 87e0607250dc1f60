#!/usr/bin/env bash
# `hetflow run` of the skeleton job on 3 local nodes, for every data plane:
# exit 0, every tensor checked, output prefixed per node, report complete.
source "$(dirname "$0")/lib.sh"

base=7310
for dp in auto "ucx:sm,self" "ucx:tcp,self" caf; do
  topo="$HETFLOW_SCRATCH/skel-${dp//[:,]/_}.toml"
  write_topology "$topo" $base 3 "$dp" 'kind = "skeleton"' 'tensors = 40' \
    'tensor_bytes = "1MiB"' 'window = 3'
  base=$((base + 10))
  out="$topo.out"
  timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$out" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || { cat "$out"; fail "[$dp] hetflow run exited $rc"; }
  for n in n0 n1 n2; do
    grep -q "^\[$n\] " "$out" || { cat "$out"; fail "[$dp] no output prefixed [$n]"; }
  done
  [[ $(json_get "$topo.json" 'd["status"]') == ok ]] || fail "[$dp] report status"
  [[ $(json_get "$topo.json" 'd["result"]["tensors"]') == 40 ]] || fail "[$dp] tensors checked"
  [[ $(json_get "$topo.json" 'd["result"]["bytes"]') == 41943040 ]] || fail "[$dp] bytes checked"
  [[ $(json_get "$topo.json" 'len(d["nodes"])') == 3 ]] || fail "[$dp] node reports"
  [[ $(json_get "$topo.json" 'all(n["status"]=="ok" for n in d["nodes"])') == True ]] ||
    fail "[$dp] node status"
  plane=$(json_get "$topo.json" 'd["result"]["data_plane"]')
  case "$dp" in
    caf) [[ $plane == caf ]] || fail "[$dp] ran on data plane '$plane'" ;;
    ucx:*) [[ $plane == ucx* ]] || fail "[$dp] ran on data plane '$plane'" ;;
  esac
  # Bytes crossed the data plane between n0->n1 and n1->n2 (not by reference).
  sent=$(json_get "$topo.json" 'sum(n["data_plane_stats"]["bytes_sent"] for n in d["nodes"])')
  ((sent >= 2 * 41943040)) || fail "[$dp] data plane carried only $sent bytes"
  pass "skeleton on data plane $dp ($plane)"
done

# Two actors on one node pass tensors by reference: nothing crosses a wire.
topo="$HETFLOW_SCRATCH/one-node.toml"
write_topology "$topo" $base 1 auto 'kind = "skeleton"' 'tensors = 10' 'tensor_bytes = "64KiB"'
timeout 60 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
  { cat "$topo.out"; fail "single-node skeleton"; }
[[ $(json_get "$topo.json" 'd["nodes"][0]["data_plane_stats"]["bytes_sent"]') == 0 ]] ||
  fail "single node: tensors went through the data plane"
# ... so "auto" does not start UCX for it.
[[ $(json_get "$topo.json" 'd["nodes"][0]["data_plane"]') == caf ]] ||
  fail "single node, data_plane auto: want the CAF data plane (nothing to reach), got $(json_get "$topo.json" 'd["nodes"][0]["data_plane"]')"
pass "single node passes tensors by reference (data plane auto: UCX not started)"

# The transport benchmark job, small: one row per size, every figure measured.
topo="$HETFLOW_SCRATCH/tbench.toml"
write_topology "$topo" $((base + 10)) 2 auto 'kind = "transport_bench"' 'sizes = [8, "64KiB"]' \
  'bytes_per_size = "4MiB"' 'pings = 20'
timeout 60 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
  { cat "$topo.out"; fail "transport_bench run"; }
[[ $(json_get "$topo.json" '[r["bytes"] for r in d["result"]["results"]]') == "[8, 65536]" ]] ||
  fail "transport_bench: want rows for 8 and 65536 bytes"
json_get "$topo.json" 'all(r["latency_us"] > 0 and r["gbytes_per_s"] > 0 for r in d["result"]["results"])' |
  grep -q True || fail "transport_bench: a latency or bandwidth is missing"
# Node 0 sends, per size, its pings, 2 windows of warm-up (8 messages each,
# untimed), then the timed messages: 8 B: 20 + 16 + 200000 (the cap);
# 64 KiB: 20 + 16 + 64.
sent=$(json_get "$topo.json" '[n for n in d["nodes"] if n["node"] == "n0"][0]["data_plane_stats"]["messages_sent"]')
[[ $sent == 200136 ]] || fail "transport_bench: node 0 sent $sent messages, want 200136 (pings, warm-up, timed)"
pass "transport_bench measures every size"

# Every thread of every node runs on the node's time slice ([cluster]
# thread_slice_us, default 100 us; HETFLOW_THREAD_SLICE_US overrides, 0 =
# the kernel's own), as each node's report shows it (nodes[].thread_slice,
# read from /proc/self/task/*/sched at the job's end). Kernels before 6.12
# take no per-thread slice (applied: false): then only the request is checked.
topo="$HETFLOW_SCRATCH/slice.toml"
write_topology "$topo" $((base + 20)) 2 caf 'kind = "skeleton"' 'tensors = 10' 'tensor_bytes = "64KiB"'
for want in default 250 0; do
  us=$want
  envs=()
  if [[ $want == default ]]; then us=100; else envs=("HETFLOW_THREAD_SLICE_US=$want"); fi
  timeout 60 env "${envs[@]}" "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
    { cat "$topo.out"; fail "thread slice $want: the run failed"; }
  json_get "$topo.json" "all(n['thread_slice']['requested_us'] == $us for n in d['nodes']) and len(d['nodes']) == 2" |
    grep -q True || { python3 -m json.tool "$topo.json"; fail "thread slice $want: want $us us requested on both nodes"; }
  if ((us > 0)); then
    applied=$(json_get "$topo.json" "all(n['thread_slice']['applied'] for n in d['nodes'])")
    if [[ $applied == True ]]; then
      json_get "$topo.json" "all(s['threads'] >= 3 and s['min_us'] == s['max_us'] == $us for s in (n['thread_slice'] for n in d['nodes']))" |
        grep -q True || { python3 -m json.tool "$topo.json"; fail "thread slice $want: a thread of a node is not on $us us"; }
      pass "thread slice $want: every thread of both nodes on $us us"
    else
      pass "thread slice $want: requested; this kernel ($(uname -r)) takes no per-thread slice"
    fi
  else
    json_get "$topo.json" "all(not n['thread_slice']['applied'] and (n['thread_slice']['threads'] == 0 or n['thread_slice']['min_us'] > 100) for n in d['nodes'])" |
      grep -q True || { python3 -m json.tool "$topo.json"; fail "thread slice 0: want the kernel's default slice"; }
    pass "thread slice 0: the kernel's default slice"
  fi
done
