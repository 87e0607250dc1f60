#!/usr/bin/env bash
# A stand-in for Slurm's srun in deploy tests: runs the command once per host
# of $FAKE_SRUN_HOSTS (space-separated), each with SLURMD_NODENAME and
# SLURM_NODEID set as srun would, all at once; exits with the highest status.
# srun's own options (--opt=value) are logged to $FAKE_SRUN_LOG and skipped.
# With $FAKE_SRUN_NETNS (network namespaces, one per host, in the same order)
# each task runs in its host's namespace (`ip netns exec`).
set -u
while (($#)) && [[ $1 == --* ]]; do
  echo "$1" >>"${FAKE_SRUN_LOG:-/dev/null}"
  shift
done
pids=()
i=0
read -ra netns <<<"${FAKE_SRUN_NETNS:-}"
for h in $FAKE_SRUN_HOSTS; do
  in_ns=()
  [[ -n ${netns[$i]:-} ]] && in_ns=(ip netns exec "${netns[$i]}")
  "${in_ns[@]}" env SLURMD_NODENAME="$h" SLURM_NODEID=$i SLURM_PROCID=$i "$@" &
  pids+=($!)
  i=$((i + 1))
done
trap 'kill "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for p in "${pids[@]}"; do
  wait "$p"
  r=$?
  ((r > rc)) && rc=$r
done
exit "$rc"
