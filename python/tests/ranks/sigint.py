"""Ctrl-C during a map over 3 ranks (test_ranks.py, test_ctrl_c).

Items (of 256 KiB: through the rings) append "i rank pid" to
$GP_DIR/runs and then wait for a file that never comes. A
KeyboardInterrupt in the script prints INTERRUPTED and exits 5.
"""
import os
import sys
import time

import gpupool
from bigitems import big, index

D = os.environ["GP_DIR"]


def stuck(b):
    i = index(b)
    fd = os.open(os.path.join(D, "runs"), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT, 0o644)
    os.write(fd, b"%d %s %d\n" % (i, os.environ["GPUPOOL_RANK"].encode(),
                                  os.getpid()))
    os.close(fd)
    while not os.path.exists(os.path.join(D, "never")):
        time.sleep(0.01)
    return i


def main():
    try:
        with gpupool.Pool(fake_gpus=2, grace=0.5) as p:
            print("MAP STARTS", flush=True)
            p.map(stuck, [big(i, 256 << 10) for i in range(100)],
                  chunksize=1)
        print("MAP ENDED", flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(5)


if __name__ == "__main__":
    main()
