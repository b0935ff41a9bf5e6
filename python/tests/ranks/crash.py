"""A worker crash on rank 2 fails only its item (test_ranks.py,
test_worker_crash_on_rank_2).

Items of 80 KiB (through the rings). The first item rank 2 runs of each
kind claims $GP_DIR/claim-KIND (an O_EXCL create, holding the item's
index) and its worker dies: os._exit(3) for "exit" (a map), SIGKILL for
"kill" (submit). out.json says what rank 0 got back.
"""
import json
import os
import signal
import time

import gpupool
from bigitems import big, index

D = os.environ["GP_DIR"]


def _claim(kind, i):
    try:
        fd = os.open(os.path.join(D, "claim-" + kind),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(fd, b"%d\n" % i)
    os.close(fd)
    return True


def crash_exit(b):
    i = index(b)
    time.sleep(0.002)
    if os.environ.get("GPUPOOL_RANK") == "2" and _claim("exit", i):
        os._exit(3)
    return i + 1


def crash_kill(b):
    i = index(b)
    time.sleep(0.002)
    if os.environ.get("GPUPOOL_RANK") == "2" and _claim("kill", i):
        os.kill(os.getpid(), signal.SIGKILL)
    return i + 1


def sq(x):
    return x * x


def where(i):
    time.sleep(0.01)
    return os.environ.get("GPUPOOL_RANK")


def _what(e):
    return [type(e).__name__, isinstance(e, gpupool.WorkerCrashed),
            str(e), getattr(e, "exitcode", None), getattr(e, "signal", None)]


def main():
    out = {}
    with gpupool.Pool(fake_gpus=2) as p:
        r = p.map(crash_exit, [big(i, 80 << 10) for i in range(600)],
                  chunksize=1,
                  return_exceptions=True)
        out["exit_bad"] = [[i] + (_what(v) if isinstance(v, BaseException)
                                  else [repr(v)])
                           for i, v in enumerate(r) if v != i + 1]
        futs = [p.submit(crash_kill, big(i, 80 << 10)) for i in range(300)]
        bad = []
        for i, f in enumerate(futs):
            e = f.exception(timeout=120)
            if e is not None:
                bad.append([i] + _what(e))
            elif f.result() != i + 1:
                bad.append([i, repr(f.result())])
        out["kill_bad"] = bad
        out["after"] = p.map(sq, range(20000)) == [x * x
                                                   for x in range(20000)]
        out["after_ranks"] = sorted(set(p.map(where, range(120),
                                              chunksize=1)))
    with open(os.path.join(D, "out.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
