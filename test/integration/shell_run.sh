#!/usr/bin/env bash
# The actor shell (issue 8): `hetflow shell HOST:PORT` against a running
# 2-node ps job with a cluster secret, whose worker 1 sleeps 25 s at clock 3
# (the watchdog's drill) so that waits are open while the shell looks:
# nodes, actors, stat, waits, clocks, plan, --json, the errors and their exit
# codes, a wrong or missing secret, an address nobody listens on, the
# interactive mode in tmux (help, Tab completion of an actor name, quit),
# and last the kill drill, which fails the job as a crash does.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH
T="$S/tmux.sock"  # a private tmux server, its socket in the scratch dir
trap 'tmux -S "$T" kill-server 2>/dev/null; cleanup' EXIT

head -c 32 /dev/urandom | base64 >"$S/cluster.secret"
head -c 32 /dev/urandom | base64 >"$S/wrong.secret"
chmod 600 "$S/cluster.secret" "$S/wrong.secret"

topo="$S/shell.toml"
write_topology "$topo" 9870 2 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'classes = 5' 'test_size = 128' 'batch_size = 32' 'lr = 0.02' 'epochs = 1' \
  'train_size = 640' 'strategy = "ps"' 'ps_timeout = "90s"' 'ps_drill_worker = 1' 'ps_drill_clock = 3' \
  'ps_drill_delay = "25s"'
sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$topo"
sed -i 's/^connection_timeout = .*/connection_timeout = "10s"\nsecret_file = "cluster.secret"/' "$topo"
"$HETFLOW" validate "$topo" >/dev/null || fail "validate $topo"

shell() { "$HETFLOW" shell 127.0.0.1:9870 --topology "$topo" "$@"; }
# run_shell NAME ARGS...: output in $S/NAME.out / .err, exit status in RC.
run_shell() {
  local name=$1
  shift
  "$HETFLOW" shell "$@" >"$S/$name.out" 2>"$S/$name.err"
  RC=$?
}
show() { cat "$S/$1.out" "$S/$1.err"; }

"$HETFLOW" run "$topo" >"$topo.out" 2>&1 &
run_pid=$!
PIDS+=($run_pid)

# The stall: psworker0's pull waits on the shards, the shards on psworker1.
deadline=$((SECONDS + 40))
while ((SECONDS < deadline)); do
  shell -c waits >"$S/waits.out" 2>"$S/waits.err" && grep -q "psworker0 waits on the ps shards" "$S/waits.out" &&
    grep -q "waits on worker 'psworker1' on node 'n1' (the slowest, at clock 3)" "$S/waits.out" && break
  kill -0 $run_pid 2>/dev/null || { cat "$topo.out"; fail "the job ended before the shell saw its stall"; }
  sleep 0.1
done
grep -q "^n0 .*psworker0 waits on the ps shards for the weights of clock [0-9]" "$S/waits.out" ||
  { show waits; cat "$topo.out"; fail "waits: no psworker0 waiting on the ps shards"; }
grep -q "^n[01] .*ps[01] waits on worker 'psworker1' on node 'n1' (the slowest, at clock 3)" "$S/waits.out" ||
  { show waits; fail "waits: no shard waiting on psworker1"; }
pass "waits: psworker0 waits on the shards, the shards on psworker1, with how long"

run_shell nodes 127.0.0.1:9870 --topology "$topo" -c nodes
[[ $RC -eq 0 ]] || { show nodes; fail "nodes: exit $RC"; }
grep -qE "^n0 +127\.0\.0\.1:9870 +up +[0-9.]+ s +[0-9.]+ MiB" "$S/nodes.out" || { show nodes; fail "nodes: n0 not up"; }
grep -qE "^n1 +127\.0\.0\.1:9871 +up " "$S/nodes.out" || { show nodes; fail "nodes: n1 not up"; }
grep -q "cluster 'it-shell', job 'train' (strategy ps), 2 nodes" "$S/nodes.out" || { show nodes; fail "nodes: header"; }
pass "nodes lists n0 and n1 up, with uptime and memory"

run_shell actors 127.0.0.1:9870 --topology "$topo" -c actors
[[ $RC -eq 0 ]] || { show actors; fail "actors: exit $RC"; }
# MAILBOX: wire messages delivered and not yet let go (a number once the
# actor got any: the shards have pushes and pulls by now).
for a in "psworker0 +ps_worker +n0 +running" "psworker1 +ps_worker +n1 +running" "ps0 +ps_shard +n0 +running +[0-9]+ " \
  "ps1 +ps_shard +n1 +running +[0-9]+ "; do
  grep -qE "^$a" "$S/actors.out" || { show actors; fail "actors: no line '$a'"; }
done
grep -qE "^psworker0 .*waits on the ps shards for the weights of clock" "$S/actors.out" ||
  { show actors; fail "actors: psworker0's wait is not shown"; }
run_shell actors_n1 127.0.0.1:9870 --topology "$topo" -c "actors n1"
[[ $RC -eq 0 ]] && ! grep -q "^psworker0 " "$S/actors_n1.out" && grep -q "^psworker1 " "$S/actors_n1.out" ||
  { show actors_n1; fail "actors n1: not just n1's actors"; }
run_shell actors_bad 127.0.0.1:9870 --topology "$topo" -c "actors n7"
[[ $RC -eq 1 ]] && grep -q "unknown node 'n7'" "$S/actors_bad.err" || { show actors_bad; fail "actors n7: exit $RC"; }
pass "actors lists the job's 4 actors with type, node, state, mailbox and waits; actors NODE filters"

run_shell stat 127.0.0.1:9871 --topology "$topo" -c "stat psworker1"
[[ $RC -eq 0 ]] || { show stat; fail "stat psworker1: exit $RC"; }
grep -q "^actor psworker1 (type ps_worker) on node n1 (127.0.0.1:9871)" "$S/stat.out" || { show stat; fail "stat: header"; }
grep -q "waited on  by ps[01] on node n[01]: ps[01] waits on worker 'psworker1'" "$S/stat.out" ||
  { show stat; fail "stat psworker1: does not say the shards wait on it"; }
pass "stat psworker1 (asked at n1) says who waits on it"

run_shell json_actors 127.0.0.1:9870 --topology "$topo" -c actors --json
[[ $RC -eq 0 ]] || { show json_actors; fail "actors --json: exit $RC"; }
python3 - "$S/json_actors.out" <<'PY' || { show json_actors; fail "actors --json does not parse or lacks the actors"; }
import json, sys
d = json.load(open(sys.argv[1]))
names = {a["name"]: a for a in d["actors"]}
assert set(names) == {"psworker0", "psworker1", "ps0", "ps1"}, names.keys()
assert names["ps0"]["type"] == "ps_shard" and names["ps0"]["node"] == "n0", names["ps0"]
assert isinstance(names["ps0"]["mailbox"], int) and names["ps0"]["mailbox"] >= 0, names["ps0"]
assert any("the ps shards" == w["on"] for w in names["psworker0"]["waits"]), names["psworker0"]
PY
# Per-actor rates cover the node's last one-second sample: during the stall
# ps0 receives nothing (0 msgs/s) though its total is above 0.
deadline=$((SECONDS + 6))
rate_zero=0
while ((SECONDS < deadline)); do
  run_shell json_rates 127.0.0.1:9870 --topology "$topo" -c actors --json
  python3 - "$S/json_rates.out" <<'PY' && { rate_zero=1; break; }
import json, sys
g = {a["name"]: a for a in json.load(open(sys.argv[1]))["actors"]}["ps0"]["gauges"]
ok = g.get("actor_wire_received_messages_total", 0) > 0 and g.get("actor_wire_received_messages_per_second") == 0
sys.exit(0 if ok else 1)
PY
  sleep 0.5
done
((rate_zero)) || { show json_rates; fail "actors --json: ps0's message rate is not 0 during the stall"; }
run_shell actors_rates 127.0.0.1:9870 --topology "$topo" -c actors
grep -qE "^ps0 .*in: [0-9]+ msgs [0-9.]+ [KMG]?i?B \(0\.0 msgs/s, 0 B/s\)" "$S/actors_rates.out" ||
  { show actors_rates; fail "actors: ps0's wire traffic in, with its rate"; }
pass "actors shows each actor's wire traffic per second over the last second (0 for ps0 in the stall)"
run_shell json_nodes 127.0.0.1:9870 --topology "$topo" -c nodes --json
python3 -c "
import json,sys
d=json.load(open('$S/json_nodes.out'))
assert [n['name'] for n in d['nodes']]==['n0','n1'] and all(n['state']=='up' for n in d['nodes']), d
assert all(n['rss_bytes']>0 and n['uptime_s']>0 for n in d['nodes']), d" || { show json_nodes; fail "nodes --json"; }
run_shell json_waits 127.0.0.1:9870 --topology "$topo" -c waits --json
python3 -c "
import json
d=json.load(open('$S/json_waits.out'))
assert any(w['actor']=='psworker0' and w['node']=='n0' and w['seconds']>0 for w in d['waits']), d" ||
  { show json_waits; fail "waits --json"; }
pass "--json output of actors, nodes and waits parses and holds the job"

run_shell clocks 127.0.0.1:9870 --topology "$topo" -c clocks
[[ $RC -eq 0 ]] && grep -qE "^PS SERVER +NODE +GLOBAL CLOCK" "$S/clocks.out" && grep -qE "^ps0 +n0 +3 " "$S/clocks.out" &&
  grep -qE "^psworker1 +n1 +3$" "$S/clocks.out" &&
  grep -q "psworker0 waits on the ps shards for the weights of clock" "$S/clocks.out" ||
  { show clocks; fail "clocks: for ps, the shards' global clock, the workers' clocks and the clock waits"; }
# The drill holds psworker1 at clock 3 (BSP): every shard's global clock is 3, the bound 0.
run_shell json_clocks 127.0.0.1:9870 --topology "$topo" -c clocks --json
python3 -c "
import json
d=json.load(open('$S/json_clocks.out'))
s={v['actor']: v for v in d['ps_servers']}; w={v['actor']: v['clock'] for v in d['ps_workers']}
assert set(s) == {'ps0', 'ps1'} and all(v['global_clock'] == 3 and v['staleness_bound'] == 0 for v in s.values()), s
assert w['psworker1'] == 3 and w['psworker0'] in (3, 4), w" || { show json_clocks; fail "clocks --json"; }
run_shell plan 127.0.0.1:9870 --topology "$topo" -c plan
[[ $RC -eq 0 ]] && grep -q "^actors (4):" "$S/plan.out" && grep -qE "^  psworker1 +ps_worker +on node n1" "$S/plan.out" ||
  { show plan; fail "plan: the placement"; }
pass "clocks shows the shards' global clocks, the workers' clocks and the clock waits; plan prints the placement"

run_shell unknown 127.0.0.1:9870 --topology "$topo" -c frobnicate
[[ $RC -eq 1 ]] && grep -q "unknown command 'frobnicate'; try help" "$S/unknown.err" ||
  { show unknown; fail "unknown command: exit $RC"; }
run_shell typo 127.0.0.1:9870 --topology "$topo" -c "stat psworkr1"
[[ $RC -eq 1 ]] && grep -q "unknown actor 'psworkr1'; did you mean 'psworker1'?" "$S/typo.err" ||
  { show typo; fail "unknown actor: exit $RC"; }
run_shell pause 127.0.0.1:9870 --topology "$topo" -c "pause ps0"
[[ $RC -eq 1 ]] && grep -q "pause ps0: actor 'ps0' (ps_shard) does not honour pause; HetPipe stages (hp_stage) do" \
  "$S/pause.err" || { show pause; fail "pause: exit $RC"; }
run_shell checkpoint 127.0.0.1:9870 --topology "$topo" -c "checkpoint"
[[ $RC -eq 1 ]] && grep -q "ps0: checkpoint at clock [0-9]*: the job has no checkpoint_dir" "$S/checkpoint.err" ||
  { show checkpoint; fail "checkpoint: exit $RC"; }
run_shell usage1 -c nodes
[[ $RC -eq 2 ]] || { show usage1; fail "no HOST:PORT: exit $RC, want 2"; }
run_shell usage2 localhost -c nodes
[[ $RC -eq 2 ]] || { show usage2; fail "HOST without port: exit $RC, want 2"; }
pass "unknown command (1), unknown actor with did-you-mean (1), pause of a ps shard refused (1), checkpoint without checkpoint_dir refused (1), usage errors (2)"

# Secrets: another secret, and none at all, are refused (exit 3) and logged by the node.
HETFLOW_SECRET_FILE="$S/wrong.secret" run_shell wrong 127.0.0.1:9870 -c nodes
[[ $RC -eq 3 ]] && grep -q "127.0.0.1:9870 refused the shell: authentication failed" "$S/wrong.err" ||
  { show wrong; fail "a wrong secret: exit $RC, want 3 and 'authentication failed'"; }
env -u HETFLOW_SECRET_FILE "$HETFLOW" shell 127.0.0.1:9870 -c nodes >"$S/none.out" 2>"$S/none.err"
RC=$?
[[ $RC -eq 3 ]] && grep -q "refused the shell: authentication required" "$S/none.err" ||
  { show none; fail "no secret: exit $RC, want 3"; }
HETFLOW_SECRET_FILE="$S/cluster.secret" run_shell right 127.0.0.1:9870 -c nodes
[[ $RC -eq 0 ]] || { show right; fail "HETFLOW_SECRET_FILE with the right secret: exit $RC"; }
wait_for_text "$topo.out" "\[n0\].*refused shell client 'shell@.*authentication failed" 5 ||
  { cat "$topo.out"; fail "n0 did not log the refused shell"; }
pass "a wrong or missing secret is refused (exit 3) and n0 logs it; HETFLOW_SECRET_FILE works"

start=$(date +%s.%N)
run_shell nobody 127.0.0.1:9879 -c nodes
took=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
[[ $RC -eq 3 ]] && grep -q "127.0.0.1:9879" "$S/nobody.err" && [[ $(wc -l <"$S/nobody.err") -eq 1 ]] ||
  { show nobody; fail "nobody at 9879: exit $RC, want 3 and one line naming the address"; }
python3 -c "assert $took < 5" || fail "nobody at 9879 took $took s"
pass "an address nobody listens on: exit 3 in $took s: $(cat "$S/nobody.err")"

# Interactive, as a person would: help, Tab completion of an actor name, quit.
tmux -S "$T" new-session -d -s shell -x 160 -y 60 \
  "HETFLOW_SHELL_HISTORY='$S/history' '$HETFLOW' shell 127.0.0.1:9870 --topology '$topo'; echo SHELL-EXIT=\$?; sleep 60"
pane() { tmux -S "$T" capture-pane -p -t shell -S -200; }
wait_pane() {  # wait_pane TEXT SECONDS
  local t=0
  until pane | grep -q -- "$1"; do
    sleep 0.1
    t=$((t + 1))
    ((t > $2 * 10)) && return 1
  done
  return 0
}
wait_pane "hetflow n0>" 10 || { pane; fail "interactive: no prompt"; }
tmux -S "$T" send-keys -t shell "help" Enter
wait_pane "kill ACTOR " 5 || { pane; fail "interactive: help printed nothing"; }
tmux -S "$T" send-keys -t shell "stat psw" Tab
wait_pane "hetflow n0> stat psworker" 5 || { pane; fail "interactive: Tab did not complete 'psw' to 'psworker'"; }
tmux -S "$T" send-keys -t shell "1" Enter
wait_pane "^actor psworker1 (type ps_worker) on node n1" 10 || { pane; fail "interactive: stat psworker1"; }
tmux -S "$T" send-keys -t shell "nodse" Enter
wait_pane "unknown command 'nodse' (did you mean 'nodes'?); try help" 5 || { pane; fail "interactive: unknown command"; }
tmux -S "$T" send-keys -t shell "quit" Enter
wait_pane "SHELL-EXIT=0" 5 || { pane; fail "interactive: quit did not exit 0"; }
grep -q "psworker1" "$S/history" || { pane; fail "interactive: no history written"; }
pass "interactive (tmux): help, Tab completes 'stat psw' to 'stat psworker', stat, unknown command, quit, history"

# Last: the kill drill. The job fails as for a crashed actor.
run_shell kill 127.0.0.1:9870 --topology "$topo" -c "kill ps0"
[[ $RC -eq 0 ]] && grep -q "sent exit(kill) to actor 'ps0' (ps_shard) on node 'n0'" "$S/kill.out" ||
  { show kill; fail "kill ps0: exit $RC"; }
wait_exit $run_pid 30 || { cat "$topo.out"; fail "the job did not stop after kill ps0"; }
[[ $WAIT_RC -eq 1 ]] || { cat "$topo.out"; fail "after kill ps0 the job exited $WAIT_RC, want 1"; }
grep -q "actor 'ps0' on node 'n0' died before finishing" "$topo.out" ||
  { cat "$topo.out"; fail "the job's failure does not name the killed actor"; }
grep -q "fault drill from a shell: killing actor 'ps0'" "$topo.out" || { cat "$topo.out"; fail "n0 did not log the drill"; }
run_shell after 127.0.0.1:9870 --topology "$topo" -c nodes
[[ $RC -eq 3 ]] || { show after; fail "shell after the job ended: exit $RC, want 3"; }
pass "kill ps0: the job fails (exit 1) naming ps0; afterwards the shell exits 3"
