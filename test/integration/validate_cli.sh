#!/usr/bin/env bash
# `hetflow validate`: exit 0 for the shipped examples; for a bad file, exit 2
# and every problem as FILE:LINE:COL: error: ...
source "$(dirname "$0")/lib.sh"

for f in "$HETFLOW_SRC"/deploy/examples/*.toml; do
  "$HETFLOW" validate "$f" >/dev/null 2>"$HETFLOW_SCRATCH/v.err" || { cat "$HETFLOW_SCRATCH/v.err"; fail "$f does not validate"; }
done
pass "every example validates"

bad="$HETFLOW_SCRATCH/bad.toml"
cat >"$bad" <<'TOML'
[cluster]
name = "bad"
join_timout = "5s"

[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 70000
devices = [ { kind = "gpu" } ]

[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 7100

[job]
kind = "skeletn"
TOML
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1
rc=$?
cat "$bad.out"
[[ $rc -eq 2 ]] || fail "bad file: exit $rc, want 2"
n=$(grep -c "^$bad:[0-9]*:[0-9]*: error: " "$bad.out")
((n >= 5)) || fail "expected at least 5 located errors, got $n"
grep -q "$bad:3:1: error: .*join_timeout" "$bad.out" || fail "typo'd key without a suggestion"
grep -q "did you mean 'skeleton'" "$bad.out" || fail "unknown job kind without a suggestion"
grep -q "$bad:8:.*port" "$bad.out" || fail "port out of range not reported at line 8"
pass "a bad file gets every problem, located"

"$HETFLOW" validate "$HETFLOW_SCRATCH" >"$bad.dir" 2>&1
[[ $? -eq 2 ]] || fail "a directory must be rejected"
head -c 4096 /dev/urandom >"$HETFLOW_SCRATCH/garbage.toml"
timeout 10 "$HETFLOW" validate "$HETFLOW_SCRATCH/garbage.toml" >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "binary garbage must be rejected with exit 2"
pass "directories and garbage are rejected cleanly"
