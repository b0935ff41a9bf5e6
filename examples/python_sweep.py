"""100 jobs over this machine's GPUs, one long-lived pinned worker per GPU
(fake GPUs where there are none). Run: python3 examples/python_sweep.py

Over every GPU of an MPI job (each rank's workers; docs/cluster.md):
    mpirun --oversubscribe -np 3 python3 -m gpupool examples/python_sweep.py
"""
import os
import sys

import gpupool


def job(lr):
    # A real job would use torch.device("cuda") here: the worker's
    # CUDA_VISIBLE_DEVICES names its own GPU only.
    return (lr, os.environ.get("GPUPOOL_RANK", "0"), gpupool.current().gpu,
            os.environ["CUDA_VISIBLE_DEVICES"])


if __name__ == "__main__":
    try:
        pool = gpupool.Pool()
    except OSError as e:  # no GPU (or no driver) here
        print("gpupool: %s; using 4 fake GPUs" % e, file=sys.stderr)
        pool = gpupool.Pool(fake_gpus=4)
    with pool:
        for lr, rank, gpu, visible in pool.imap_unordered(job, range(100)):
            print("job %3d ran on rank %s, GPU %d (CUDA_VISIBLE_DEVICES=%s)"
                  % (lr, rank, gpu, visible))
