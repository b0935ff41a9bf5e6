"""sec_mpi.py: gpupool-run across 3 local MPI ranks."""
import os
import shutil

from common import log, stats
from peers import base_env, json_lines


def mpi_section(cfg, build, work, res, notes):
    """gpupool-run across 3 local MPI ranks x 2 fake GPUs: how many null
    tasks a second rank 0 dispatches (bench_ranks: gpupool-run's own code,
    workers that answer at once). No peer: nothing else does this."""
    br = os.path.join(build, "bench", "bench_ranks")
    mpirun = shutil.which("mpirun")
    if not os.path.exists(br) or mpirun is None:
        notes.append("MPI dispatch not measured: %s" % (
            "no mpirun" if mpirun is None else
            "bench_ranks not built (a build without MPI)"))
        return
    # Each local rank stands for a node of its own: without claims, as
    # host-wide claims would make the three share one host's fake GPUs
    # (each task of one rank waiting for the others' on the same ids).
    argv = [mpirun, "--oversubscribe", "-np", "3", "-x", "GPUPOOL_CLAIMS"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    log("gpupool-run over 3 MPI ranks: %d null tasks x %d rounds" % (
        cfg["mpi_n"], cfg["mpi_rounds"]))
    runs = json_lines(argv + [br, str(cfg["mpi_n"]), "2",
                              str(cfg["mpi_rounds"])],
                      env=dict(base_env(), GPUPOOL_CLAIMS="none"))
    if not runs:
        return
    res["mpi"] = {"ranks": 3, "gpus_per_rank": 2, "n": cfg["mpi_n"],
                  "per_s": stats([x["per_s"] for x in runs]),
                  "mpi_per_s": stats([x["mpi_per_s"] for x in runs]),
                  "secs": stats([x["secs"] for x in runs])}
