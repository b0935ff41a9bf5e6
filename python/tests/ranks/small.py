"""A small map, under whatever launcher started `python -m gpupool`
(test_ranks.py: test_srun, test_no_launcher, test_exit_status).

    small.py [exit CODE | raise]

Writes $GP_DIR/out.json: the script's GPUPOOL_RANK, the pool's size,
whether 3000 results came back right, and the GPUPOOL_RANK each item saw.
With "exit CODE" it then exits with CODE; with "raise" it raises.
"""
import json
import os
import sys
import time

import gpupool

D = os.environ["GP_DIR"]


def rank_sq(x):
    if x % 10 == 0:
        time.sleep(0.005)
    return x * x, os.environ.get("GPUPOOL_RANK"), \
        os.environ.get("GPUPOOL_RANKS")


def main():
    out = {"script_rank": os.environ.get("GPUPOOL_RANK"),
           "script_ranks": os.environ.get("GPUPOOL_RANKS"),
           "argv": sys.argv, "name": __name__}
    with gpupool.Pool(fake_gpus=2) as p:
        out["size"] = p.size()
        r = p.map(rank_sq, range(3000))
    out["ok"] = [v for v, _, _ in r] == [x * x for x in range(3000)]
    out["ranks"] = sorted({str(k) for _, k, _ in r})
    out["nranks"] = sorted({str(k) for _, _, k in r})
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)
    if sys.argv[1:2] == ["exit"]:
        sys.exit(int(sys.argv[2]))
    if sys.argv[1:2] == ["raise"]:
        raise RuntimeError("small.py raised on purpose")


if __name__ == "__main__":
    main()
