"""progress=True: a tqdm bar when tqdm is installed, else a plain line on
stderr, redrawn at most every 0.2 s (a display rate, not synchronisation).
update() is called from the thread that drives the C pool."""

import sys
import time


class _Line:
    def __init__(self, total, desc):
        self.total = total
        self.desc = desc
        self.n = 0
        self.last = 0.0
        self.t0 = time.monotonic()

    def update(self, n):
        self.n += n
        now = time.monotonic()
        if now - self.last >= 0.2:
            self.last = now
            self._draw(now, "\r")

    def _draw(self, now, end):
        rate = self.n / max(now - self.t0, 1e-9)
        of = "/%d" % self.total if self.total is not None else ""
        sys.stderr.write("%s%s: %d%s items, %.0f/s%s" % (
            end, self.desc, self.n, of, rate, ""))
        sys.stderr.flush()

    def close(self):
        self._draw(time.monotonic(), "\r")
        sys.stderr.write("\n")
        sys.stderr.flush()


def make(progress, total, desc="gpupool"):
    """None when progress is false; else an object with update(n) and
    close()."""
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _Line(total, desc)
    return tqdm(total=total, desc=desc, unit="item")
