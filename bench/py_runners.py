#!/usr/bin/env python3
"""The two ways people run shell commands on 4 GPUs with multiprocessing
today, as the benchmark harness runs them against gpupool-run.

    python3 py_runners.py semaphore FILE
    python3 py_runners.py pool FILE

FILE holds one shell command per line; each runs as `/bin/sh -c LINE`
(subprocess with shell=True) with CUDA_VISIBLE_DEVICES set to its GPU.

semaphore: a multiprocessing.Process per task, all started at once, each
    entering a Semaphore(4) and popping a free GPU id from a Manager().list()
    (pushing it back when done). Simple, and the number of live processes
    grows with the number of tasks.
pool: Pool(processes=4).map over the commands, the GPU taken from the
    worker's index (current_process()._identity). Default chunking: each
    worker gets fixed chunks of len/16 commands.

Exit status: the number of failed commands (at most 101), like GNU parallel.
The start method is the platform default (fork on Linux before 3.14).
"""
import multiprocessing as mp
import os
import subprocess
import sys

GPUS = 4


def run_on(cmd, gpu):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
    return subprocess.run(cmd, shell=True, env=env).returncode


def semaphore_task(cmd, sem, free):
    with sem:
        gpu = free.pop()
        try:
            rc = run_on(cmd, gpu)
        finally:
            free.append(gpu)
    sys.exit(1 if rc else 0)


def semaphore(cmds):
    sem = mp.Semaphore(GPUS)
    with mp.Manager() as manager:
        free = manager.list(range(GPUS))
        procs = [mp.Process(target=semaphore_task, args=(c, sem, free))
                 for c in cmds]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return sum(1 for p in procs if p.exitcode != 0)


def pool_task(cmd):
    gpu = (mp.current_process()._identity[0] - 1) % GPUS
    return run_on(cmd, gpu)


def pool(cmds):
    with mp.Pool(processes=GPUS) as p:
        rcs = p.map(pool_task, cmds)
    return sum(1 for rc in rcs if rc != 0)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("semaphore", "pool"):
        sys.exit("usage: py_runners.py semaphore|pool FILE")
    with open(sys.argv[2]) as f:
        cmds = [line.rstrip("\n") for line in f if line.strip()]
    failed = (semaphore if sys.argv[1] == "semaphore" else pool)(cmds)
    sys.exit(min(failed, 101))


if __name__ == "__main__":
    main()
