#!/usr/bin/env bash
# Writes a hetflow topology for a Slurm allocation: one node per allocated
# host, in the allocation's order (the first host is the head), each listening
# on its host name (or address) and the same port.
#
#   make-topology.sh [options] JOB_FILE
#
# JOB_FILE is a topology without nodes: its [cluster] and [job] tables (and
# any [[actors]]) are copied as they are, and one [[nodes]] table per host is
# appended. Actors placed with [[actors]] name nodes by their Slurm node name.
# See deploy/slurm/example-job.toml.
#
# Options:
#   --nodelist LIST      Slurm host list (default: $SLURM_JOB_NODELIST, else
#                        $SLURM_NODELIST), e.g. "n[01-03],gpu7". Expanded with
#                        `scontrol show hostnames` when scontrol is on PATH,
#                        otherwise by this script (prefix[a-b,c]suffix groups,
#                        zero padding kept, several groups per name).
#   --port P             port of every node (default 7100)
#   --host-suffix S      host = node name + S, e.g. ".ib" for a fabric's names
#   --resolve            host = the node name's address (getent hosts), for
#                        hosts whose name does not resolve on the node itself
#   --cpu-threads T      threads of each node's cpu device (default 0: all)
#   --gpus-per-node G    also G cuda devices (index 0..G-1) per node (default 0)
#   --output FILE, -o    write there instead of standard output
#   --expand-only        print the expanded host names, one a line, and stop
#
# Node names are the Slurm node names (what $SLURMD_NODENAME says in each
# task), so `hetflow node TOPOLOGY --name "$SLURMD_NODENAME"` picks the right
# one. Exit status: 0 ok, 2 bad usage, job file or host list.
set -euo pipefail

die() { echo "make-topology: $*" >&2; exit 2; }

# --- host list expansion (the fallback for machines without scontrol) ---------

# expand_item STRING: one hostlist item (no top-level comma) -> names, one a line.
expand_item() {
  local s=$1
  if [[ $s != *'['* ]]; then
    [[ $s != *']'* ]] || die "unbalanced ']' in host list item '$s'"
    printf '%s\n' "$s"
    return
  fi
  local prefix=${s%%\[*} rest=${s#*\[}
  [[ $rest == *']'* ]] || die "unbalanced '[' in host list item '$s'"
  local inner=${rest%%\]*} suffix=${rest#*\]}
  [[ -n $inner ]] || die "empty brackets in host list item '$s'"
  [[ $inner != *'['* ]] || die "nested '[' in host list item '$s'"
  local range a b i width ranges
  IFS=, read -ra ranges <<<"$inner"
  for range in "${ranges[@]}"; do
    if [[ $range =~ ^([0-9]+)-([0-9]+)$ ]]; then
      a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
      ((10#$a <= 10#$b)) || die "range $range runs backwards in '$s'"
      ((10#$b - 10#$a < 100000)) || die "range $range in '$s' is too large"
      width=${#a}
      for ((i = 10#$a; i <= 10#$b; i++)); do
        expand_item "$prefix$(printf '%0*d' "$width" "$i")$suffix"
      done
    elif [[ $range =~ ^[0-9]+$ ]]; then
      expand_item "$prefix$range$suffix"
    else
      die "'$range' in host list item '$s' is neither a number nor a range a-b"
    fi
  done
}

# expand_hostlist LIST: split at commas outside brackets, expand each item.
expand_hostlist() {
  local list=$1 item="" depth=0 c i
  for ((i = 0; i < ${#list}; i++)); do
    c=${list:i:1}
    case $c in
      '[') depth=$((depth + 1)); item+=$c ;;
      ']') depth=$((depth - 1)); ((depth >= 0)) || die "unbalanced ']' in host list '$list'"; item+=$c ;;
      ',')
        if ((depth == 0)); then
          [[ -n $item ]] && expand_item "$item"
          item=""
        else
          item+=$c
        fi
        ;;
      ' ' | $'\t' | $'\n') ;;
      *) item+=$c ;;
    esac
  done
  ((depth == 0)) || die "unbalanced '[' in host list '$list'"
  [[ -n $item ]] && expand_item "$item"
  return 0
}

hostnames() {  # hostnames LIST: scontrol's expansion when available, else ours
  if command -v scontrol >/dev/null 2>&1; then
    local out
    if out=$(scontrol show hostnames "$1" 2>/dev/null) && [[ -n $out ]]; then
      printf '%s\n' "$out"
      return
    fi
    echo "make-topology: 'scontrol show hostnames' failed; expanding '$1' here" >&2
  fi
  expand_hostlist "$1"
}

# --- options -------------------------------------------------------------------

nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
port=7100
host_suffix=""
resolve=0
cpu_threads=0
gpus=0
output=""
expand_only=0
job_file=""
arg() { (($# >= 2)) || die "$1 needs a value"; printf '%s' "$2"; }
while (($#)); do
  case $1 in
    --nodelist) nodelist=$(arg "$@"); shift 2 ;;
    --nodelist=*) nodelist=${1#*=}; shift ;;
    --port) port=$(arg "$@"); shift 2 ;;
    --port=*) port=${1#*=}; shift ;;
    --host-suffix) host_suffix=$(arg "$@"); shift 2 ;;
    --host-suffix=*) host_suffix=${1#*=}; shift ;;
    --resolve) resolve=1; shift ;;
    --cpu-threads) cpu_threads=$(arg "$@"); shift 2 ;;
    --cpu-threads=*) cpu_threads=${1#*=}; shift ;;
    --gpus-per-node) gpus=$(arg "$@"); shift 2 ;;
    --gpus-per-node=*) gpus=${1#*=}; shift ;;
    -o | --output) output=$(arg "$@"); shift 2 ;;
    --output=*) output=${1#*=}; shift ;;
    --expand-only) expand_only=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z $job_file ]] || die "more than one job file ('$job_file', '$1')"; job_file=$1; shift ;;
  esac
done

[[ -n $nodelist ]] || die "no host list: run inside a Slurm allocation or pass --nodelist LIST"
# (An assignment, not a process substitution: a bad list must stop the script.)
expanded=$(hostnames "$nodelist")
mapfile -t hosts <<<"$expanded"
[[ -n $expanded ]] || hosts=()
((${#hosts[@]} > 0)) || die "host list '$nodelist' names no host"
declare -A seen=()
for h in "${hosts[@]}"; do
  [[ $h =~ ^[A-Za-z0-9_.-]+$ ]] || die "host '$h' is not a valid node name ([A-Za-z0-9_.-]+)"
  [[ -z ${seen[$h]:-} ]] || die "host '$h' appears twice in '$nodelist'"
  seen[$h]=1
done
if ((expand_only)); then
  printf '%s\n' "${hosts[@]}"
  exit 0
fi

[[ $port =~ ^[0-9]+$ ]] && ((port >= 1 && port <= 65535)) || die "--port must be 1..65535, not '$port'"
[[ $cpu_threads =~ ^[0-9]+$ ]] || die "--cpu-threads must be a number, not '$cpu_threads'"
[[ $gpus =~ ^[0-9]+$ ]] || die "--gpus-per-node must be a number, not '$gpus'"
[[ -n $job_file ]] || die "usage: make-topology.sh [options] JOB_FILE (see --help)"
[[ -r $job_file ]] || die "cannot read job file '$job_file'"
if grep -qE '^[[:space:]]*\[\[[[:space:]]*nodes[[:space:]]*\]\]' "$job_file"; then
  die "$job_file already has [[nodes]]; a job file gives [cluster] and [job], the nodes come from the allocation"
fi

host_of() {  # host_of NAME
  local h=$1$host_suffix
  if ((resolve)); then
    local a
    a=$(getent hosts "$h" | awk '{print $1; exit}') || true
    [[ -n $a ]] || die "--resolve: '$h' has no address (getent hosts)"
    h=$a
  fi
  printf '%s' "$h"
}

devices() {
  local d="{ kind = \"cpu\", threads = $cpu_threads }" g
  for ((g = 0; g < gpus; g++)); do d+=", { kind = \"cuda\", index = $g }"; done
  printf '[ %s ]' "$d"
}

addrs=()
for h in "${hosts[@]}"; do
  a=$(host_of "$h")
  addrs+=("$a")
done

generate() {
  echo "# Generated by deploy/slurm/make-topology.sh from $job_file"
  echo "# for the host list $nodelist (${#hosts[@]} nodes)${SLURM_JOB_ID:+, Slurm job $SLURM_JOB_ID}."
  echo
  cat "$job_file"
  # The job file's last line may lack a newline.
  [[ -z $(tail -c 1 "$job_file") ]] || echo
  echo
  echo "# --- nodes: one per allocated host, the first is the head ---"
  local i
  for ((i = 0; i < ${#hosts[@]}; i++)); do
    echo
    echo '[[nodes]]'
    echo "name = \"${hosts[$i]}\""
    echo "host = \"${addrs[$i]}\""
    echo "port = $port"
    echo "devices = $(devices)"
  done
}

if [[ -n $output ]]; then
  generate >"$output.tmp.$$" && mv -f "$output.tmp.$$" "$output"
else
  generate
fi
