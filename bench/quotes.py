#!/usr/bin/env python3
"""quotes.py: the benchmark figures the docs quote, kept equal to the
published run (docs/benchmarks.md, between its results markers).

    quotes.py [--write] [SRCROOT]

Each entry of QUOTES is a sentence of a doc with {key} where it quotes a
figure, and each key names a cell of a table of the published run (its
section heading, the row whose first cell starts with a label, a column
by header or position) and which part of the cell is quoted (the median
before a "[min-max]"). Without --write: exit 1 naming every quote that
is stale (its figure differs from the run's) or lost (the sentence is no
longer in its file, or is there twice); suite docs runs this. --write
puts the run's figures into the sentences; bench/run.py --publish calls
it after it replaces the run, so republishing regenerates every quote.
A figure not listed here may not be quoted from a run: write the
sentence with a {key} here, or point at docs/benchmarks.md instead.
"""
import os
import re
import sys

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
NUM = r"[0-9][0-9.,]*[kM]?"

# key: (section heading contains, first cell starts with, column: header
# text or index, part: "first" (the cell's first word) or "all"). The
# Targets table's measured cells are "median [min-max]": quote "first".
CELLS = {
    "rk_x": ("Targets", "ranks: gpupool.Pool.map over 3 ranks", 1, "first"),
    "rk_mb": ("Targets", "ranks: 1 MiB items (bytes)", 1, "first"),
    "mpi_all": ("gpupool-run across 3 MPI ranks", "", "tasks/s in all", "all"),
    "mpi_over": ("gpupool-run across 3 MPI ranks", "", "tasks/s over MPI", "all"),
    "py_map_rate": ("Python: trivial items",
                    "gpupool.Pool.map (default chunks)", 3, "all"),
    "py_map_x": ("Python: trivial items", "multiprocessing Pool.map", 4,
                 "all"),
    "py_submit_us": ("Python: one item in flight",
                     "gpupool Pool.submit(f, x).result()",
                     "us a round trip", "first"),
    "py_submit_x": ("Python: one item in flight", "ProcessPoolExecutor",
                    "gpupool faster by", "all"),
    "py_map1_us": ("Python: one item in flight", "gpupool Pool.map",
                   "us a round trip", "first"),
    "rt_pipe_x": ("one item in flight (round trip", "all on one CPU",
                  "gpupool / pipe", "all"),
    "spawn_x": ("1000 x true", "gpupool-run", "x raw bound", "all"),
    "parallel_x": ("1000 x true", "GNU parallel", "x raw bound", "all"),
    "parallel_by": ("1000 x true", "GNU parallel", "gpupool-run faster by",
                    "all"),
    "launch_ms": ("1000 x true", "gpupool-run", "launch to 1st task ms",
                  "all"),
    "raw_launch_ms": ("1000 x true", "raw posix_spawn", "launch to 1st task ms",
                      "all"),
    "rss_mib": ("pile-up and footprint", "gpupool-run", "master peak RSS MiB",
                "all"),
    "map_rate": ("pool_map: trivial items", "pool_map", 5, "all"),
    "map_pool_x": ("pool_map: trivial items", "Pool.map (default", 6, "all"),
    "bufs_pool_x": ("Targets", "gp_pool_map into the caller's buffers trivial",
                    "measured", "first"),
    "mb1_memcpy_x": ("payload sweep", "1 MiB", "pool_map x memcpy", "all"),
    "mb1_view_x": ("payload sweep", "1 MiB", "views x memcpy", "all"),
}
for kind, row in (("b1", "bytes of 1 MiB"), ("b16", "bytes of 16 MiB"),
                  ("n1", "numpy of 1 MiB"), ("n16", "numpy of 16 MiB")):
    CELLS["big_%s_gp" % kind] = ("big items echoed", row, 2, "first")
    CELLS["big_%s_mp" % kind] = ("big items echoed", row, 3, "first")
    CELLS["big_%s_x" % kind] = ("big items echoed", row, 4, "all")

# (file, sentence with {key} for each quoted figure). A sentence may span
# lines: any run of blanks in it matches any run of blanks in the file.
QUOTES = [
    ("docs/cluster.md", "In the published run Pool.map over 3 local ranks "
     "was {rk_x}x"),
    ("docs/cluster.md", "1 MiB items reached {rk_mb}x MPI's own"),
    ("README.md", "Rank 0 dispatched {mpi_over} null tasks/s to two other "
     "local ranks in the published run"),
    ("docs/cluster.md", "the median was {mpi_all} tasks/s in all, "
     "{mpi_over} of them to ranks 1 and 2 over MPI"),
    ("docs/python.md", "`map` of x * 2 over 10^6 ints {py_map_rate} items/s, "
     "{py_map_x}x `multiprocessing.Pool(4).map`; `submit(f, x).result()` "
     "{py_submit_us} us a round trip, {py_submit_x}x `ProcessPoolExecutor`; "
     "`map(f, [x])` {py_map1_us} us"),
    ("docs/python.md", "| `bytes` of 1 MiB | 128 | {big_b1_gp} | {big_b1_mp} "
     "| {big_b1_x} |"),
    ("docs/python.md", "| `bytes` of 16 MiB | 16 | {big_b16_gp} | "
     "{big_b16_mp} | {big_b16_x} |"),
    ("docs/python.md", "| numpy `uint8` array of 1 MiB | 128 | {big_n1_gp} | "
     "{big_n1_mp} | {big_n1_x} |"),
    ("docs/python.md", "| numpy `uint8` array of 16 MiB | 16 | {big_n16_gp} "
     "| {big_n16_mp} | {big_n16_x} |"),
    ("docs/design.md", "about {rt_pipe_x}× a raw pipe ping-pong "
     "(docs/benchmarks.md)"),
    ("docs/benchmarks.md", "gpupool-run is {spawn_x}x the raw bound and GNU "
     "parallel {parallel_x}x it, so gpupool-run is {parallel_by}x faster"),
    ("docs/benchmarks.md", "launch to first task takes {launch_ms} ms, the "
     "raw bound {raw_launch_ms} ms"),
    ("docs/benchmarks.md", "One item in flight is {rt_pipe_x}x a raw pipe "
     "ping-pong"),
    ("docs/benchmarks.md", "`pool_map` moves {map_rate} trivial items/s, "
     "{map_pool_x}x `Pool.map`; into the caller's buffers {bufs_pool_x}x"),
    ("docs/benchmarks.md", "1 MiB items echoed at {mb1_memcpy_x}x memcpy with "
     "a fresh `malloc` per result, {mb1_view_x}x read where they lie"),
    ("docs/benchmarks.md", "The master's peak RSS is {rss_mib} MiB"),
]


def run_text(root):
    with open(os.path.join(root, "docs", "benchmarks.md"),
              encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit("docs/benchmarks.md: no %s ... %s" % (BEGIN, END))
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def tables(run):
    """{heading: [rows of cells]} of the run's markdown tables."""
    out, head = {}, None
    for line in run.split("\n"):
        if line.startswith("#"):
            head = line.lstrip("#").strip()
            out[head] = []
        elif line.startswith("|") and head is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("- ") for c in cells):
                out[head].append(cells)
    return out


def cell(tabs, key):
    sec, row, col, part = CELLS[key]
    heads = [h for h in tabs if sec in h]
    if len(heads) != 1:
        raise KeyError("%s: %d sections of the run match %r" %
                       (key, len(heads), sec))
    rows = tabs[heads[0]]
    if isinstance(col, str):
        idx = [i for i, h in enumerate(rows[0]) if col in h]
        if len(idx) != 1:
            raise KeyError("%s: %d columns match %r" % (key, len(idx), col))
        col = idx[0]
    # A row named whole is that row, though others start with its name
    # (its "..., started clean" twin).
    hits = ([r for r in rows[1:] if r[0] == row] or
            [r for r in rows[1:] if r[0].startswith(row)])
    if not hits or (row and len(hits) != 1):
        raise KeyError("%s: %d rows start with %r in %r" %
                       (key, len(hits), row, heads[0]))
    v = hits[0][col]
    return v.split()[0] if part == "first" else v


def pattern(sentence):
    """The sentence as a regex: each {key} a group, blanks flexible."""
    out, keys = "", []
    for lit, key in re.findall(r"([^{]*)(?:\{(\w+)\})?", sentence):
        out += r"\s+".join(re.escape(w) for w in re.split(r"\s+", lit))
        if key:
            out += "(%s)" % NUM
            keys.append(key)
    return re.compile(out), keys


def main():
    write = "--write" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--write"]
    root = args[0] if args else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    tabs = tables(run_text(root))
    bad, changed = [], {}
    for path, sentence in QUOTES:
        full = os.path.join(root, path)
        text = changed.get(full)
        if text is None:
            with open(full, encoding="utf-8") as f:
                text = f.read()
        rx, keys = pattern(sentence)
        found = list(rx.finditer(text))
        if len(found) != 1:
            bad.append("%s: %d places say %r (update bench/quotes.py)" %
                       (path, len(found), sentence))
            continue
        m = found[0]
        try:
            want = [cell(tabs, k) for k in keys]
        except KeyError as e:
            bad.append("%s: %s (bench/quotes.py)" % (path, e.args[0]))
            continue
        for i, (k, w) in enumerate(zip(keys, want)):
            if m.group(i + 1) != w:
                bad.append("%s: quotes %s = %s; the published run says %s" %
                           (path, k, m.group(i + 1), w))
        if write:
            spans = [(m.start(i + 1), m.end(i + 1), w)
                     for i, w in enumerate(want)]
            for a, b, w in reversed(spans):
                text = text[:a] + w + text[b:]
            changed[full] = text
    if write:
        for full, text in changed.items():
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        lost = [b for b in bad if "places say" in b or "bench/quotes.py)" in b]
        print("\n".join(lost) if lost else "%d quotes written" % len(QUOTES))
        return 1 if lost else 0
    print("\n".join(bad) if bad else
          "%d quotes match the published run" % len(QUOTES))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
