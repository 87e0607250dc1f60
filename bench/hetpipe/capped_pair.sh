# Shared by bench/hetpipe/run.sh and stage_times.sh: source it, then
#   topo FILE [JOB_LINES...]
# writes the memory-capped pair's topology to FILE: two nodes of one cpu
# thread each on this host (ports 7610, 7611), n1's device capped at 40 MiB
# (too small for the whole VGG-11 width 0.25, big enough for a stage),
# VGG-11 on Fashion-MNIST, batch 64, one epoch of ${steps:-300} steps, then
# the given [job] lines (the strategy and its keys).
topo() {
  local f=$1 l
  shift
  {
    echo '[cluster]'
    echo 'name = "bench-hetpipe"'
    local n
    for n in 0 1; do
      echo '[[nodes]]'
      echo "name = \"n$n\""
      echo 'host = "127.0.0.1"'
      echo "port = $((7610 + n))"
      if ((n == 0)); then
        echo 'devices = [ { kind = "cpu", threads = 1 } ]'
      else
        echo 'devices = [ { kind = "cpu", threads = 1, memory = "40MiB" } ]'
      fi
    done
    echo '[job]'
    echo 'kind = "train"'
    echo 'model = "vgg11"'
    echo 'width = 0.25'
    echo 'dataset = "fashion-mnist"'
    echo 'epochs = 1'
    echo "max_steps_per_epoch = ${steps:-300}"
    echo 'eval_each_epoch = false'
    echo 'batch_size = 64'
    echo 'lr = 0.01'
    for l in "$@"; do echo "$l"; done
  } >"$f"
}
