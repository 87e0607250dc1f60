#!/usr/bin/env bash
# Runs every libFuzzer target of test/fuzz/ for SECONDS each (default 600),
# one after another, and prints a Markdown table (target, runs, exec/s,
# coverage, corpus, crashes) for bench/fuzz/RESULTS.md.
#
#   bench/fuzz/run.sh [SECONDS]
#
# Environment:
#   BUILD    build folder (default build-fuzz, made here with clang if needed)
#   TARGETS  space-separated subset (default: all six)
#   WORK     where corpora, logs and crash inputs go (default
#            $BUILD/fuzz-runs/<UTC time>); the seed corpora in
#            test/fuzz/corpus/ are only read
#   RSS_MB   memory limit per fuzzer (default 2048); an input over it is a crash
#   INPUT_TIMEOUT  seconds one input may take (default 10); longer is a crash
#
# A target that crashes is started again on its grown corpus until its time
# is used up (at most 20 restarts), so one bug does not hide the rest of the
# run. Each crash input is kept as $WORK/<target>/crash-* (also leak-,
# timeout-, oom-); replay one with `$BUILD/bin/<target> FILE`. Inputs that
# crashed go to test/fuzz/regressions/<target>/ once fixed: the fuzz_replay_*
# unit tests replay them in every build.
set -euo pipefail

SECONDS_EACH=${1:-600}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build-fuzz}
ALL_TARGETS="topology_fuzz profile_db_fuzz wire_protocols_fuzz envelope_decode_fuzz preprocess_chunks_fuzz
  checkpoint_fuzz"
TARGETS=${TARGETS:-$ALL_TARGETS}
WORK=${WORK:-$BUILD/fuzz-runs/$(date -u +%Y%m%dT%H%M%SZ)}
RSS_MB=${RSS_MB:-2048}
INPUT_TIMEOUT=${INPUT_TIMEOUT:-10}

if [[ ! -f $BUILD/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHETFLOW_CUDA=OFF -DHETFLOW_FUZZ=ON >&2
fi
# shellcheck disable=SC2086
ninja -C "$BUILD" $TARGETS >&2

mkdir -p "$WORK"
rows=()
for t in $TARGETS; do
  dir=$WORK/$t
  mkdir -p "$dir/corpus"
  cp "$SRC/test/fuzz/corpus/$t/"* "$dir/corpus/"
  opts=(-rss_limit_mb="$RSS_MB" -timeout="$INPUT_TIMEOUT" -print_final_stats=1
        -artifact_prefix="$dir/")
  [[ -f $SRC/test/fuzz/$t.dict ]] && opts+=(-dict="$SRC/test/fuzz/$t.dict")
  runs=0 restarts=0 start=$(date +%s) left=$SECONDS_EACH
  echo "== $t: ${SECONDS_EACH}s, log $dir/log.txt" >&2
  : >"$dir/log.txt"
  while (( left > 0 && restarts <= 20 )); do
    rc=0
    "$BUILD/bin/$t" "${opts[@]}" -max_total_time="$left" "$dir/corpus" >>"$dir/log.txt" 2>&1 || rc=$?
    n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/log.txt" | tail -1 | grep -o '[0-9]*$' || true)
    runs=$(( runs + ${n:-0} ))
    (( rc == 0 )) && break
    restarts=$(( restarts + 1 ))
    left=$(( SECONDS_EACH - ($(date +%s) - start) ))
  done
  elapsed=$(( $(date +%s) - start ))
  (( elapsed > 0 )) || elapsed=1
  # The last status line, e.g. "#123 REDUCE cov: 2920 ft: 8344 corp: 54/29Kb ...".
  last=$(grep -E '^#[0-9]+' "$dir/log.txt" | grep 'cov:' | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  units=$(find "$dir/corpus" -type f | wc -l)
  bytes=$(du -sb "$dir/corpus" | cut -f1)
  crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  rows+=("| $t | $runs | $(( runs / elapsed )) | ${cov:-?}/${ft:-?} | $units files, $bytes B | $crashes |")
  if (( restarts > 0 )); then echo "   $t restarted $restarts times after crashes" >&2; fi
done

echo "Command: \`bench/fuzz/run.sh $SECONDS_EACH\` (${SECONDS_EACH}s per target), $(date -u '+%Y-%m-%d %H:%M UTC'),"
dirty=$(git -C "$SRC" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')
echo "commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')$dirty, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end; work folder $WORK."
echo
echo "| target | runs | exec/s | coverage (cov/ft) | corpus | crashes |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
