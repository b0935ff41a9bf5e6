"""A rank lost mid-map (test_ranks.py, test_rank_lost_mid_map).

    ranklost.py RETRIES

Pool(fake_gpus=2, retries=RETRIES, rank_timeout=2) maps gated() over 60
items of 1 MiB (through the rings), one per chunk. Each run of an item
appends "i rank pid" to $GP_DIR/runs when it starts, then waits for
$GP_DIR/go (the test makes it once it has SIGKILLed or SIGSTOPped rank
2). out.json: per item, its value or its exception (type, message); then
a map after the loss.
"""
import json
import os
import sys
import time

import gpupool
from bigitems import big, index

D = os.environ["GP_DIR"]


def gated(b):
    i = index(b)
    fd = os.open(os.path.join(D, "runs"), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT, 0o644)
    os.write(fd, b"%d %s %d\n" % (i, os.environ["GPUPOOL_RANK"].encode(),
                                  os.getpid()))
    os.close(fd)
    while not os.path.exists(os.path.join(D, "go")):
        time.sleep(0.01)
    return 3 * i


def where(i):
    time.sleep(0.005)
    return os.environ.get("GPUPOOL_RANK")


def main():
    retries = int(sys.argv[1])
    out = {}
    with gpupool.Pool(fake_gpus=2, retries=retries, rank_timeout=2) as p:
        try:
            r = p.map(gated, [big(i, 1 << 20) for i in range(60)],
                      chunksize=1,
                      return_exceptions=retries == 0)
        except Exception as e:
            out["raised"] = [type(e).__name__, str(e)]
            r = []
        out["results"] = [
            [type(v).__name__, isinstance(v, gpupool.RankLost),
             isinstance(v, gpupool.PoolError), str(v)]
            if isinstance(v, BaseException) else v for v in r]
        print("MAP ENDED", flush=True)
        out["after"] = p.map(where, range(300), chunksize=1)
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
