"""A checkpointed map over 3 ranks (test_ranks.py, test_checkpoint_*).

    ckpt.py CHECKPOINT

Maps marked() over 2000 items of 8 KiB, chunks of 10 (80 KiB: through the
rings), with checkpoint=CHECKPOINT.
Each item appends "i rank" to $GP_DIR/side when it starts; items from
1000 on wait for $GP_DIR/go first, so a run without it never ends (the
test kills it); those before take 2 ms. Prints "done True" when every
result is right.
"""
import os
import sys
import time

import gpupool
from bigitems import big, index

D = os.environ["GP_DIR"]
N = 2000


def marked(b):
    i = index(b)
    fd = os.open(os.path.join(D, "side"), os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT, 0o644)
    os.write(fd, b"%d %s\n" % (i, os.environ["GPUPOOL_RANK"].encode()))
    os.close(fd)
    if i < N // 2:
        time.sleep(0.002)  # so that the kill finds some running
    while i >= N // 2 and not os.path.exists(os.path.join(D, "go")):
        time.sleep(0.01)
    return 3 * i + 1


def main():
    with gpupool.Pool(fake_gpus=2) as p:
        r = p.map(marked, [big(i, 8 << 10) for i in range(N)], chunksize=10,
                  checkpoint=sys.argv[1])
    print("done", r == [3 * i + 1 for i in range(N)], flush=True)


if __name__ == "__main__":
    main()
