#!/usr/bin/env bash
# The Slurm batch script on three "hosts": deploy/slurm/hetflow.sbatch runs
# as in an allocation of n[01-03] (SLURM_JOB_ID, SLURM_JOB_NODELIST set), and
# a fake srun (test/deploy/fake_srun.sh) starts each task in its own network
# namespace, where /etc/hosts gives the Slurm node names n01..n03 the hosts'
# addresses, as a cluster's DNS would. The generated topology names every
# node by its Slurm name on the same port; each task must pick its node from
# SLURMD_NODENAME, listen on its own host and finish the job with the others
# (the tensors crossing the hosts' links). Needs root and iproute2; skipped
# (77) otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"
netns_setup 3

names=(n01 n02 n03)
hosts=()
for i in 0 1 2; do hosts+=("${NS_ADDR[$i]} ${names[$i]}"); done
for i in 0 1 2; do netns_hosts_file "$i" "${hosts[@]}"; done
mkdir -p fake-bin
ln -sf "$HETFLOW_SRC/test/deploy/fake_srun.sh" fake-bin/srun
cat >job.toml <<'TOML'
[cluster]
name = "slurm-netns"
data_plane = "auto"
ucx_tls = "tcp,self"
join_timeout = "30s"
[job]
kind = "skeleton"
tensors = 16
tensor_bytes = "1MiB"
TOML
tx0=$(netns_bytes 0 tx)
PATH=$HETFLOW_SCRATCH/fake-bin:$PATH SLURM_JOB_ID=4244 SLURM_JOB_NODELIST='n[01-03]' \
  SLURM_SUBMIT_DIR=$HETFLOW_SCRATCH HETFLOW_RUN_DIR=$HETFLOW_SCRATCH/run \
  FAKE_SRUN_HOSTS="${names[*]}" FAKE_SRUN_NETNS="${NS_HOSTS[*]}" \
  timeout 120 "$HETFLOW_SRC/deploy/slurm/hetflow.sbatch" job.toml >run.out 2>&1 &
PIDS+=($!)
wait $!
rc=$?
[[ $rc == 0 ]] || { cat run.out; fail "hetflow.sbatch exited $rc"; }
for i in 0 1 2; do
  n=${names[$i]}
  grep -q "\[$n\] info: node '$n' of cluster 'slurm-netns' listening on $n:7100" run.out ||
    { cat run.out; fail "node $n did not listen on $n:7100"; }
  [[ $(json_get "run/report-$n.json" 'd["status"]') == ok ]] || fail "node $n's report"
done
[[ $(json_get "run/report-n01.json.job" 'd["result"]["tensors"]') == 16 ]] || fail "job report: tensors"
sent=$(($(netns_bytes 0 tx) - tx0))
((sent >= 16 * 1048576)) || fail "n01's link sent only $sent bytes: the tensors did not cross the hosts"
[[ -z $(netns_leftovers) ]] || fail "processes left in the namespaces"
pass "hetflow.sbatch on n[01-03], one task per namespace: job ok, $sent bytes over n01's link"
