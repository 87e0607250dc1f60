#!/usr/bin/env bash
# deploy/slurm: host list expansion (scontrol when present, our parser when
# not), the topology that hetflow.sbatch --dry-run generates for a fake
# allocation (validated with `hetflow validate` and read back as TOML), the
# errors, and a real run of the batch script's node commands through a fake
# srun on three loopback addresses.
source "$HETFLOW_SRC/test/integration/lib.sh"

slurm=$HETFLOW_SRC/deploy/slurm
mt=$slurm/make-topology.sh
sb=$slurm/hetflow.sbatch
# Run outside any real allocation, whatever the environment says.
unset SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_SUBMIT_DIR HETFLOW_HOME HETFLOW_RUN_DIR

# Fake Slurm commands, first on PATH.
fake=$HETFLOW_SCRATCH/fake-bin
mkdir -p "$fake"
cat >"$fake/scontrol" <<'EOF'
#!/usr/bin/env bash
# fake scontrol: `show hostnames LIST` prints $FAKE_HOSTNAMES or fails
[[ $1 == show && $2 == hostnames && -n ${FAKE_HOSTNAMES:-} ]] || exit 1
tr ' ' '\n' <<<"$FAKE_HOSTNAMES"
EOF
chmod +x "$fake/scontrol"
ln -sf "$HETFLOW_SRC/test/deploy/fake_srun.sh" "$fake/srun"
export PATH=$fake:$PATH

# --- host lists ------------------------------------------------------------------
# With scontrol failing (FAKE_HOSTNAMES unset) the script expands by itself.
expect_hosts() {  # expect_hosts LIST "EXPECTED NAMES"
  local got
  got=$("$mt" --expand-only --nodelist "$1" 2>"$HETFLOW_SCRATCH/expand.err" | tr '\n' ' ')
  [[ "${got% }" == "$2" ]] || fail "host list '$1' expanded to '${got% }', want '$2'"
}
expect_hosts 'n[01-03],gpu7' 'n01 n02 n03 gpu7'
expect_hosts 'rack[1-2]-n[08-10]' 'rack1-n08 rack1-n09 rack1-n10 rack2-n08 rack2-n09 rack2-n10'
expect_hosts 'x[001-003,7]y' 'x001y x002y x003y x7y'
expect_hosts 'c[9-11]' 'c9 c10 c11'
expect_hosts 'a, b,c.example.org' 'a b c.example.org'
expect_hosts 'solo' 'solo'
grep -q "expanding" "$HETFLOW_SCRATCH/expand.err" || fail "no note that scontrol failed and the list was expanded here"
for bad in 'n[1-3' 'n1-3]' 'n[3-1]' 'n[a-b]' 'n[]' 'n[1-2],n1' 'bad/name'; do
  "$mt" --expand-only --nodelist "$bad" >/dev/null 2>"$HETFLOW_SCRATCH/bad.err"
  rc=$?
  [[ $rc == 2 && -s "$HETFLOW_SCRATCH/bad.err" ]] || fail "bad host list '$bad': exit $rc, want 2 and a message"
done
# scontrol's expansion wins when it works.
got=$(FAKE_HOSTNAMES="alpha beta" "$mt" --expand-only --nodelist 'ignored[1-9]' | tr '\n' ' ')
[[ $got == "alpha beta " ]] || fail "scontrol's expansion was not used (got '$got')"
pass "host lists: scontrol first, own parser otherwise, bad lists refused"

# --- dry run: topology and commands ---------------------------------------------------
run=$HETFLOW_SCRATCH/dry
out=$HETFLOW_SCRATCH/dry.out
SLURM_JOB_NODELIST='n[01-03],gpu7' SLURM_JOB_ID=4242 HETFLOW_RUN_DIR=$run \
  "$sb" --dry-run "$slurm/example-job.toml" --port 7300 --gpus-per-node 2 >"$out" 2>&1 ||
  { cat "$out"; fail "dry run exited $?"; }
topo=$run/topology.toml
[[ -f $topo ]] || fail "dry run wrote no $topo"
"$HETFLOW" validate "$topo" || fail "hetflow validate refused the generated topology"
python3 - "$topo" <<'EOF' || fail "generated topology has the wrong nodes"
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
names = [n["name"] for n in d["nodes"]]
assert names == ["n01", "n02", "n03", "gpu7"], names
assert [n["host"] for n in d["nodes"]] == names, "host != Slurm node name"
assert all(n["port"] == 7300 for n in d["nodes"]), "ports"
for n in d["nodes"]:
    kinds = [(dv["kind"], dv.get("index", 0)) for dv in n["devices"]]
    assert kinds == [("cpu", 0), ("cuda", 0), ("cuda", 1)], kinds
assert d["job"]["kind"] == "skeleton" and d["cluster"]["name"] == "slurm-skeleton"
EOF
grep -q '^srun --nodes=4 --ntasks=4 --ntasks-per-node=1 ' "$out" || { cat "$out"; fail "no srun command for 4 nodes"; }
for n in n01 n02 n03 gpu7; do
  grep -q -- "node $topo --name $n --report $run/report-$n.json" "$out" ||
    { cat "$out"; fail "dry run does not show node $n's command"; }
done
grep -q '^\[\[nodes\]\]' "$out" || fail "dry run does not print the topology"
pass "dry run: 4 nodes from 'n[01-03],gpu7', topology valid, srun and node commands shown"

# Host suffix and resolved addresses.
SLURM_JOB_NODELIST='n[1-2]' "$mt" --host-suffix .ib "$slurm/example-job.toml" >"$HETFLOW_SCRATCH/suffix.toml"
grep -q 'host = "n1.ib"' "$HETFLOW_SCRATCH/suffix.toml" || fail "--host-suffix"
"$mt" --nodelist localhost --resolve "$slurm/example-job.toml" >"$HETFLOW_SCRATCH/resolved.toml" ||
  fail "--resolve of localhost"
grep -Eq 'host = "(127\.0\.0\.1|::1)"' "$HETFLOW_SCRATCH/resolved.toml" || fail "--resolve did not give localhost's address"
pass "--host-suffix and --resolve"

# --- errors ----------------------------------------------------------------------------
expect_exit2() {  # expect_exit2 WHAT TEXT COMMAND...: exit 2 and TEXT in the output
  local what=$1 text=$2
  shift 2
  "$@" >"$HETFLOW_SCRATCH/err.out" 2>&1
  local rc=$?
  [[ $rc == 2 ]] || { cat "$HETFLOW_SCRATCH/err.out"; fail "$what: exit $rc, want 2"; }
  grep -q -- "$text" "$HETFLOW_SCRATCH/err.out" || { cat "$HETFLOW_SCRATCH/err.out"; fail "$what: no '$text' in the message"; }
}
# A job file that already lists nodes.
cp "$slurm/example-job.toml" "$HETFLOW_SCRATCH/with-nodes.toml"
printf '[[nodes]]\nname = "x"\nhost = "x"\nport = 1\n' >>"$HETFLOW_SCRATCH/with-nodes.toml"
expect_exit2 "job file with nodes" "already has \[\[nodes\]\]" \
  env SLURM_JOB_NODELIST=n1 HETFLOW_RUN_DIR="$HETFLOW_SCRATCH/e1" "$sb" --dry-run "$HETFLOW_SCRATCH/with-nodes.toml"
# A job that hetflow validate refuses: the batch script stops before srun.
sed 's/^kind = "skeleton"/kind = "skeletn"/' "$slurm/example-job.toml" >"$HETFLOW_SCRATCH/typo.toml"
expect_exit2 "invalid job" "skeleton" \
  env SLURM_JOB_NODELIST=n1 HETFLOW_RUN_DIR="$HETFLOW_SCRATCH/e2" "$sb" --dry-run "$HETFLOW_SCRATCH/typo.toml"
expect_exit2 "no host list" "no host list" env HETFLOW_RUN_DIR="$HETFLOW_SCRATCH/e3" "$sb" --dry-run "$slurm/example-job.toml"
expect_exit2 "outside Slurm" "not inside a Slurm job" env SLURM_JOB_NODELIST=n1 "$sb" "$slurm/example-job.toml"
expect_exit2 "missing job file" "cannot read job file" "$sb" --dry-run "$HETFLOW_SCRATCH/nope.toml"
pass "bad job files, invalid jobs, no allocation: exit 2 with a message"

# --- a run: the batch script's node commands, started by a fake srun ----------------
# Three "hosts" on loopback addresses (127.0.77.1-3), one port: as on a
# cluster, every node listens on its own address and the same port.
job=$HETFLOW_SCRATCH/run-job.toml
cat >"$job" <<'EOF'
[cluster]
name = "slurm-fake"
data_plane = "auto"
join_timeout = "30s"
[job]
kind = "skeleton"
tensors = 16
tensor_bytes = "256KiB"
EOF
run=$HETFLOW_SCRATCH/run
export FAKE_SRUN_HOSTS="127.0.77.1 127.0.77.2 127.0.77.3" FAKE_SRUN_LOG=$HETFLOW_SCRATCH/srun.log
SLURM_JOB_ID=4243 SLURM_JOB_NODELIST='127.0.77.[1-3]' SLURM_SUBMIT_DIR=$HETFLOW_SCRATCH HETFLOW_RUN_DIR=$run \
  timeout 120 "$sb" "$job" --port 8591 >"$HETFLOW_SCRATCH/run.out" 2>&1 &
PIDS+=($!)
wait $!
rc=$?
[[ $rc == 0 ]] || { cat "$HETFLOW_SCRATCH/run.out"; fail "batch script run exited $rc"; }
grep -q -- '--wait=60' "$FAKE_SRUN_LOG" || fail "srun was not given --wait"
for h in 127.0.77.1 127.0.77.2 127.0.77.3; do
  [[ $(json_get "$run/report-$h.json" 'd["status"]') == ok ]] || { cat "$HETFLOW_SCRATCH/run.out"; fail "node $h's report"; }
done
[[ $(json_get "$run/report-127.0.77.1.json.job" 'd["result"]["tensors"]') == 16 ]] || fail "job report: tensors"
grep -q "exit status 0" "$HETFLOW_SCRATCH/run.out" || fail "the batch script does not report the status"
pass "hetflow.sbatch ran 3 nodes through (fake) srun on 127.0.77.1-3:8591"
