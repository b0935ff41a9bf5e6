"""Busy-GPU rules on every rank (test_ranks.py, test_busy_gpus_per_rank).

Each rank's machine is the fake NVML state file $GP_DIR/nvml.RANK, which
the test writes. The top level below names it, and every rank runs the top
level (rank 0 as __main__, the others as __mp_main__) before it makes a
pool, so each rank's monitor reads its own machine, as each node's would.
out.json says what rank 0 saw:
  free   Pool(gpus="free", fake_gpus=2, busy_pct=50): its size, its
         workers' (rank, GPU), and the (rank, GPU) each of 200 items ran on;
  strict Pool(gpus="free", fake_gpus=2): the error it raised.
"""
import json
import os
import time

import gpupool

D = os.environ["GP_DIR"]
os.environ["GP_FAKE_NVML"] = os.path.join(
    D, "nvml.%s" % os.environ.get("GPUPOOL_RANK"))


def where(_):
    time.sleep(0.002)
    return os.environ.get("GPUPOOL_RANK"), \
        os.environ.get("CUDA_VISIBLE_DEVICES")


def main():
    out = {}
    with gpupool.Pool(gpus="free", fake_gpus=2, busy_pct=50) as p:
        out["free"] = {
            "size": p.size(),
            "workers": sorted([str(w.rank), w.visible] for w in p.info()),
            "ran": sorted({tuple(r) for r in p.map(where, range(200),
                                                   chunksize=1)})}
    try:
        gpupool.Pool(gpus="free", fake_gpus=2)
        out["strict"] = None
    except Exception as e:
        out["strict"] = {"init": isinstance(e, gpupool.InitError),
                         "msg": str(e)}
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
