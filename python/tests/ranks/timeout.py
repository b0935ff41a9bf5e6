"""timeout= on another rank (test_ranks.py: test_timeout_on_rank_2).

Pool(fake_gpus=2, timeout=1): the first item rank 2 runs claims
$GP_DIR/claim (O_EXCL, holding its index) and hangs; every other item
returns at once. out.json: the failures rank 0 got back (index, type,
whether a gpupool.Timeout), and a later map's ranks.
"""
import json
import os
import time

import gpupool

D = os.environ["GP_DIR"]


def hang_once(i):
    time.sleep(0.002)
    if os.environ.get("GPUPOOL_RANK") == "2":
        try:
            fd = os.open(os.path.join(D, "claim"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return i
        os.write(fd, b"%d\n" % i)
        os.close(fd)
        time.sleep(3600)
    return i


def where(i):
    time.sleep(0.01)
    return os.environ.get("GPUPOOL_RANK")


def main():
    with gpupool.Pool(fake_gpus=2, timeout=1) as p:
        t = time.monotonic()
        res = p.map(hang_once, range(300), chunksize=1,
                    return_exceptions=True)
        secs = time.monotonic() - t
        bad = [[i, type(v).__name__, isinstance(v, gpupool.Timeout)]
               for i, v in enumerate(res) if v != i]
        after = sorted(set(p.map(where, range(120), chunksize=1)))
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump({"bad": bad, "secs": secs, "after": after}, f)


if __name__ == "__main__":
    main()
