"""Every Pool surface over 3 ranks (test_ranks.py, test_surfaces).

Run as `mpirun -np 3 PYTHON -m gpupool basic.py`; $GP_DIR is where it
writes: "imports" (a line per import of this file: __name__, rank, pid),
"init" (a line per initializer call), and out.json (what rank 0 saw).
Functions are at module level: they travel by name (no cloudpickle).
"""
import json
import os
import time

import gpupool

D = os.environ["GP_DIR"]


def _append(name, line):
    fd = os.open(os.path.join(D, name), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


_append("imports", "%s %s %d\n" % (__name__,
                                   os.environ.get("GPUPOOL_RANK", "-"),
                                   os.getpid()))


def init(tag):
    rank = os.environ.get("GPUPOOL_RANK", "-")
    _append("init", "%s %s %d\n" % (tag, rank, os.getpid()))


def sq(x):
    return x * x


def add(a, b):
    return a + b


def where(x):
    time.sleep(0.02)
    return (x, os.environ.get("GPUPOOL_RANK"),
            os.environ.get("GPUPOOL_RANKS"), os.getpid())


def main():
    n = 10 ** 5
    out = {"script_rank": os.environ.get("GPUPOOL_RANK"),
           "script_ranks": os.environ.get("GPUPOOL_RANKS")}
    with gpupool.Pool(fake_gpus=2, initializer=init, initargs=("t",)) as p:
        out["size"] = p.size()
        out["info"] = [{"rank": w["rank"], "host": w["host"],
                        "pid": w["pid"]} for w in p.info()]
        t = time.monotonic()
        r = p.map(sq, range(n))
        out["map_s"] = time.monotonic() - t
        out["map_len"] = len(r)
        out["map_bad"] = [i for i, v in enumerate(r) if v != i * i][:10]
        w = p.map(where, range(240), chunksize=1)
        out["where_order"] = [x[0] for x in w] == list(range(240))
        out["where"] = [list(x[1:]) for x in w]
        want = [x * x for x in range(5000)]
        out["imap"] = list(p.imap(sq, range(5000), chunksize=7)) == want
        out["imap_unordered"] = sorted(
            p.imap_unordered(sq, range(5000), chunksize=7)) == want
        futs = [p.submit(sq, i) for i in range(300)]
        out["submit"] = [f.result(timeout=120) for f in futs] == \
            [i * i for i in range(300)]
        got = []
        ars = [p.apply_async(add, (i, 1), callback=got.append)
               for i in range(200)]
        out["apply_async"] = [a.get(120) for a in ars] == \
            [i + 1 for i in range(200)]
        out["callbacks"] = sorted(got) == [i + 1 for i in range(200)]
        out["starmap"] = p.starmap(add, [(i, 2 * i) for i in range(3000)]) \
            == [3 * i for i in range(3000)]
        out["map_async"] = p.map_async(sq, range(3000)).get(120) == \
            [x * x for x in range(3000)]
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)
    print("MAIN ran on rank %s" % os.environ.get("GPUPOOL_RANK"), flush=True)


if __name__ == "__main__":
    main()
