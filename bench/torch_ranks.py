"""Starts the ranks of a PyTorch gloo peer benchmark on this host.

run_ranks(world, argv_for_rank) starts `world` copies of a worker command
line (argv_for_rank(rank) -> list) with RANK, WORLD_SIZE, MASTER_ADDR
127.0.0.1, a free MASTER_PORT (unless set), GLOO_SOCKET_IFNAME lo and one
BLAS/OpenMP thread, waits for all, stops the others when one fails (they
would wait for it forever), and returns 0 or 1. Used by
bench/allreduce/gloo_allreduce.py and bench/dp/ddp_lenet.py.
"""
import os
import socket
import subprocess
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world, argv_for_rank):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", WORLD_SIZE=str(world),
               GLOO_SOCKET_IFNAME="lo", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.setdefault("MASTER_PORT", str(free_port()))
    procs = [subprocess.Popen(argv_for_rank(r), env=dict(env, RANK=str(r))) for r in range(world)]
    rc = 0
    try:
        pending = list(procs)
        while pending:
            for p in list(pending):
                if p.poll() is not None:
                    pending.remove(p)
                    if p.returncode != 0 and rc == 0:
                        rc = p.returncode
                        for q in pending:  # the others would wait for the dead rank
                            q.terminate()
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return 1 if rc else 0
