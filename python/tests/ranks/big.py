"""Big items and results across ranks (test_ranks.py: test_big_items).

Pool(fake_gpus=1) maps echo() over 60 items of 1 to 3 MiB of random bytes
(bytes, and numpy arrays where numpy is installed), one per chunk: each
result is the item reversed, which comes back as big as it went.
$GP_DIR/out.json: whether every result was right, the ranks that ran
them, and, for each, whether its workers had the in ring read only.
"""
import json
import os
import random

import gpupool

D = os.environ["GP_DIR"]


def ring_ro():
    """How this worker has the rank's rings: "ro" when it has one, read
    only, and nothing of them writable (the pool's extern mapping: the in
    ring on ranks 1 and 2, rank 0's out ring), "rw" when any of it is
    writable, None when it has none."""
    with open("/proc/self/maps") as f:
        perms = [ln.split()[1] for ln in f if "gpupool-ring" in ln]
    if any("w" in p for p in perms):
        return "rw"
    return "ro" if perms else None


def echo(b):
    return os.environ["GPUPOOL_RANK"], b[::-1], ring_ro()


def main():
    rnd = random.Random(27)
    items = [rnd.randbytes(rnd.randrange(1 << 20, 3 << 20))
             for _ in range(60)]
    try:
        import numpy
        items += [numpy.frombuffer(rnd.randbytes(2 << 20), dtype=numpy.uint8)
                  for _ in range(10)]
    except ImportError:
        pass
    with gpupool.Pool(fake_gpus=1) as p:
        res = p.map(echo, items, chunksize=1)
    ok = all(bytes(r[1]) == bytes(i[::-1]) for r, i in zip(res, items))
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump({"ok": ok and len(res) == len(items),
                   "ranks": sorted({r[0] for r in res}),
                   "ring_ro": sorted({(r[0], r[2]) for r in res})}, f)


if __name__ == "__main__":
    main()
