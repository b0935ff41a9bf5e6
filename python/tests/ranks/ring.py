"""Big items through the rings, and the rings given back (test_ranks.py:
test_rings_*).

Items of 1 to 2 MiB of random bytes, echoed reversed, over 3 ranks:
- with retries=1, the first item rank 2 runs kills its worker (a claim
  file, as crash.py): the retry reads the same bytes, still in the ring;
- a map whose items raise on rank 2 is canceled: what the ranks queued
  is dropped, and their ring extents with it, and the item whose result
  ended it (rank 0 pickled it into its out ring) is let go at once, not
  kept by the exception's traceback till a GC;
- a map after it is whole.
Then rank 0 waits for its rings to be empty (ring_used(), its MPI
process's sends finished, its items pickled in the out ring gone), and
each other rank says its own at the end (GPUPOOL_TEST_RING_USED); and how
many items rank 0 sent from where it pickled them, and how many of those
by reference (to ranks that map its out ring). $GP_DIR/out.json: what
came back.
"""
import json
import os
import random
import time

import gpupool
from gpupool import _ranks

D = os.environ["GP_DIR"]


def echo(b):
    if os.environ.get("GPUPOOL_RANK") == "2":
        try:
            fd = os.open(os.path.join(D, "claim"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os._exit(3)
    return os.environ["GPUPOOL_RANK"], bytes(b)[::-1]


def fail_on_2(b):
    if os.environ.get("GPUPOOL_RANK") == "2":
        raise ValueError("on rank 2")
    time.sleep(0.01)
    return len(b)


def main():
    rnd = random.Random(38)
    items = [rnd.randbytes(rnd.randrange(1 << 20, 2 << 20))
             for _ in range(40)]
    out = {}
    with gpupool.Pool(fake_gpus=1, retries=1) as p:
        res = p.map(echo, items)
        out["echo"] = all(r[1] == i[::-1] for r, i in zip(res, items))
        out["ranks"] = sorted({r[0] for r in res})
    with gpupool.Pool(fake_gpus=1) as p:
        marked = [bytes([i]) + it[1:] for i, it in enumerate(items)]
        try:
            p.map(fail_on_2, marked)
            out["failed"] = None
        except ValueError as e:
            out["failed"] = str(e)
        res = p.map(echo, items)
        out["after"] = all(r[1] == i[::-1] for r, i in zip(res, items))
    link = _ranks.world.link
    deadline = time.monotonic() + 30
    while link.ring_used() and time.monotonic() < deadline:
        link.wait(0.05)
        _ranks.world.pump()
    out["used0"] = link.ring_used()
    out["rsize"] = link.rsize
    out["in_place"] = link.in_place
    out["by_ref"] = link.by_ref
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
