# Two network namespaces joined by a veth pair, for bench/allreduce/run.sh's
# NETNS=1 mode: source this file, call netns_setup, and netns_teardown from an
# EXIT trap (it is idempotent and removes only what netns_setup created).
# Needs root and iproute2's `ip`.
#
#   namespace $ns_a: lo + $veth_a = $ip_a/24
#   namespace $ns_b: lo + $veth_b = $ip_b/24
#
# Nothing else is connected: the namespaces reach neither the root namespace
# nor the outside. Names carry the script's PID ($$), so runs side by side do
# not clash; NETNS_SUBNET (default 10.77.0) picks the /24.
ns_subnet=${NETNS_SUBNET:-10.77.0}
ns_a=hfbench-a-$$ ns_b=hfbench-b-$$
veth_a=hfva$$ veth_b=hfvb$$  # interface names: at most 15 characters
ip_a=$ns_subnet.1 ip_b=$ns_subnet.2
ns_created=()

netns_setup() {
  if [[ $(id -u) != 0 ]]; then
    echo "NETNS=1 needs root (it creates network namespaces and a veth pair)" >&2
    return 2
  fi
  command -v ip >/dev/null || { echo "NETNS=1 needs iproute2's ip" >&2; return 2; }
  local err
  if ! err=$(ip netns list 2>&1); then
    echo "NETNS=1: 'ip netns' does not work here: $err" >&2
    return 2
  fi
  local ns
  for ns in "$ns_a" "$ns_b"; do
    if ! err=$(ip netns add "$ns" 2>&1); then
      echo "NETNS=1: ip netns add $ns failed: $err" >&2
      return 2
    fi
    ns_created+=("$ns")
  done
  # Created in the root namespace, then moved; deleting a namespace deletes its
  # end of the pair and with it the peer.
  if ! err=$({ ip link add "$veth_a" type veth peer name "$veth_b" &&
               ip link set "$veth_a" netns "$ns_a" &&
               ip link set "$veth_b" netns "$ns_b" &&
               ip -n "$ns_a" addr add "$ip_a/24" dev "$veth_a" &&
               ip -n "$ns_b" addr add "$ip_b/24" dev "$veth_b" &&
               ip -n "$ns_a" link set lo up &&
               ip -n "$ns_b" link set lo up &&
               ip -n "$ns_a" link set "$veth_a" up &&
               ip -n "$ns_b" link set "$veth_b" up; } 2>&1); then
    echo "NETNS=1: setting up the veth pair $veth_a/$veth_b failed: $err" >&2
    ip link del "$veth_a" 2>/dev/null || true
    return 2
  fi
  # The links need a moment to report UP.
  local _
  for _ in $(seq 50); do
    [[ $(ip -n "$ns_a" -br link show "$veth_a" 2>/dev/null) == *UP* &&
       $(ip -n "$ns_b" -br link show "$veth_b" 2>/dev/null) == *UP* ]] && return 0
    sleep 0.1
  done
  echo "NETNS=1: the veth pair did not come up" >&2
  return 2
}

netns_teardown() {
  local ns
  for ns in "${ns_created[@]}"; do
    # Kill whatever still runs inside (a node left behind by a failure),
    # then delete the namespace (and with it its veth end).
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ns_created=()
}

