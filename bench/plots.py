"""plots.py: the plot: panels of grouped horizontal bars, drawn with
matplotlib when it is installed, else written as SVG by hand."""
import os

from common import med
from fmt import fmt_bytes, fmt_n


SHADES = {"gpupool-run": ("#b2182b", "#e0705a", "#f6b89c"),
          "spawn4": ("#4d4d4d", "#8c8c8c", "#c4c4c4"),
          None: ("#2166ac", "#4d97c8", "#9ecae1")}


def color_for(key, series_index):
    s = SHADES.get(key, SHADES[None])
    return s[min(series_index, len(s) - 1)]


def trivial_panel(title, tr):
    """A plot panel of a trivial-items measurement (pool_map's or the
    Python section's): items/s per implementation, one bar per N."""
    ns = [str(n) for n in tr["ns"]]
    return {"title": title,
            "unit": "items/s (log, higher is better)", "log": True,
            "series": ["N=%s" % fmt_n(n) for n in ns],
            "rows": [(lab_, [med((tr["by_n"].get(n, {}).get(k) or {})
                                 .get("items_per_s")) for n in ns],
                      "gpupool-run" if k == "gpupool" else
                      ("spawn4" if k.startswith("raw") else k))
                     for k, lab_ in tr["labels"].items()]}


def panels(res):
    """What the plot shows: a list of panels of grouped horizontal bars.
    rows: (label, value or [value per series], colour key)."""
    P = []
    if res.get("command_runner"):
        P += panels_cmd(res["command_runner"])
    if res.get("pool_map"):
        P += panels_pool(res["pool_map"])
    if res.get("python"):
        P += panels_python(res["python"])
    if res.get("mpi"):
        P += panels_mpi(res["mpi"])
    return P


def panels_cmd(cr):
    """The command runners' panels."""
    P = []
    lab = {k: x["label"] for k, x in cr["runners"].items()}
    names = list(lab)
    t = cr["workloads"]["true"]
    s = cr["workloads"]["sleep"]
    P.append({"title": "%s: wall / raw posix_spawn bound" % t["title"],
              "unit": "x (lower is better)", "ref": 1.0,
              "rows": [(lab[k], med(t["runners"][k]["vs_raw"]), k)
                       for k in names]})
    P.append({"title": "%s: CPU per task" % t["title"],
              "unit": "ms user+sys, runner and tasks (lower is better)",
              "rows": [(lab[k], med(t["runners"][k]["cpu_ms_per_task"]),
                        k) for k in names]})
    P.append({"title": "%s: overhead per task" % s["title"],
              "unit": "ms, (wall - ideal) / N x 4 (lower is better)",
              "rows": [(lab[k], med(s["runners"][k]
                                    ["overhead_ms_per_task"]), k)
                       for k in names]})
    P.append({"title": "launch -> first task starts",
              "unit": "ms (lower is better)", "ref": 5.0,
              "rows": [(lab[k], med(t["runners"][k]["latency_ms"]), k)
                       for k in names]})
    sk = cr["skewed"]["orders"]
    P.append({"title": "%d skewed tasks: makespan / ideal" %
                       cr["skewed"]["n"],
              "unit": "x greedy list-scheduling ideal (1 = ideal)",
              "ref": 1.0, "series": ["given order", "longest first"],
              "rows": [(lab[k], [med(sk["given"]["runners"][k]
                                     ["over_ideal"]),
                                 med(sk["lpt"]["runners"][k]
                                     ["over_ideal"])], k)
                       for k in names]})
    fp = cr["footprint"]
    ns = [str(n) for n in fp["ns"]]
    P.append({"title": "pile-up: peak live processes",
              "unit": "processes, runner's whole tree (log)",
              "log": True, "series": ["N=%s" % n for n in ns],
              "rows": [(lab[k], [fp["runners"][k].get(n, {})
                                 .get("peak_procs") for n in ns], k)
                       for k in names]})
    P.append({"title": "pile-up: peak memory (PSS sum)",
              "unit": "MiB, runner's whole tree (log)", "log": True,
              "series": ["N=%s" % n for n in ns],
              "rows": [(lab[k], [(fp["runners"][k].get(n, {})
                                  .get("peak_pss_kb") or 0) / 1024 or None
                                 for n in ns], k) for k in names]})
    P.append({"title": "runner's own peak RSS (VmHWM)",
              "unit": "MiB (lower is better)", "ref": 4.0,
              "rows": [(lab[k], max([x.get("master_hwm_kb") or 0 for x in
                                     fp["runners"][k].values()]) / 1024
                        or None, k) for k in names]})
    return P


def panels_pool(pm):
    """pool_map's panels."""
    P = []
    P.append(trivial_panel("pool_map: trivial items (x*2), 4 workers",
                           pm["trivial"]))
    rt = pm["roundtrip"]
    P.append({"title": "pool_map: one item in flight, round trip",
              "unit": "us (lower is better)",
              "series": ["all on one CPU", "scheduler's choice"],
              "rows": [(lab_, [med(rt["pinned"][k]), med(rt["free"][k])],
                        key) for k, lab_, key in (
                  ("raw_pipe_us", "raw pipe ping-pong", "spawn4"),
                  ("raw_sock_us", "raw socketpair ping-pong", "spawn4"),
                  ("pool_us", "pool_map (gp_pool_run, 1 worker)",
                   "gpupool-run"))]})
    sk = pm["skewed"]["orders"]
    names = {"gpupool": "pool_map", "map": "Pool.map (default chunks)",
             "imap_unordered": "Pool.imap_unordered"}
    P.append({"title": "pool_map: %d skewed items: makespan / ideal" %
                       pm["skewed"]["n"],
              "unit": "x greedy list-scheduling ideal (1 = ideal)",
              "ref": 1.0, "series": ["given order", "longest first"],
              "rows": [(names[k], [med(sk["given"]["impls"][k]
                                       ["over_ideal"]),
                                   med(sk["lpt"]["impls"][k]
                                       ["over_ideal"])],
                        "gpupool-run" if k == "gpupool" else k)
                       for k in sk["given"]["impls"]]})
    pl = pm["payload"]
    sizes = list(pl)
    P.append({"title": "pool_map: payload echoed, 4 workers",
              "unit": "MB/s each way (log, higher is better)",
              "log": True,
              "series": [fmt_bytes(int(z)) for z in sizes],
              "rows": [("pool_map", [med(pl[z]["impls"]["gpupool"]
                                         ["mb_per_s"]) for z in sizes],
                        "gpupool-run"),
                       ("gp_pool_map, caller's buffers",
                        [med(pl[z]["impls"].get("gpupool-bufs", {})
                             .get("mb_per_s")) for z in sizes], "xargs"),
                       ("gp_pool_run, views in done()",
                        [med(pl[z]["impls"].get("gpupool-view", {})
                             .get("mb_per_s")) for z in sizes],
                        "parallel"),
                       ("Pool.map (default chunks)",
                        [med(pl[z]["impls"].get("map", {})
                             .get("mb_per_s")) for z in sizes], "map"),
                       ("memcpy (one thread)",
                        [(med(pl[z].get("memcpy_gb_per_s")) or 0) * 1e3
                         or None for z in sizes], "spawn4")]})
    if any(x.get("gpupool_over_memcpy") for x in pl.values()):
        P.append({"title": "pool_map: payload echoed / memcpy bandwidth",
                  "unit": "x memcpy of the same size (dashed: 0.15 at "
                          "1 MiB)", "ref": 0.15,
                  "rows": [(fmt_bytes(int(z)),
                            med(pl[z].get("gpupool_over_memcpy")),
                            "gpupool-run") for z in sizes]})
    return P


def panels_python(py):
    """The Python package's panels."""
    P = []
    P.append(trivial_panel("Python: trivial items (x*2), 4 workers",
                           py["trivial"]))
    rt = py["roundtrip"]
    P.append({"title": "Python: one item in flight, round trip",
              "unit": "us (lower is better)",
              "rows": [(lab_, med(rt["impls"][k]["us"]),
                        "gpupool-run" if k.startswith("gpupool") else k)
                       for k, lab_ in rt["labels"].items()]})
    wm = py["warm"]
    P.append({"title": "Python: %d tasks, %g s set-up each, 4 slots" % (
                 wm["tasks"], wm["setup_s"]),
              "unit": "overhead s = wall - ideal (dashed: 1.5 set-ups)",
              "ref": 1.5 * wm["setup_s"],
              "rows": [(lab_, med(wm["impls"][k]["overhead_s"]),
                        "gpupool-run" if k in ("pool", "run") else k)
                       for k, lab_ in wm["labels"].items()]})
    ck = py.get("checkpoint")
    if ck:
        kinds = [k for k in ("trivial", "ms", "ms1") if k in ck["kinds"]]
        P.append({"title": "Python: map with checkpoint= / without",
                  "unit": "x wall (dashed: 1.10; lower is better)",
                  "ref": 1.10,
                  "rows": [(ck["kinds"][k]["title"],
                            med(ck["kinds"][k].get("ckpt_cost")),
                            "gpupool-run") for k in kinds]})
    pl = py.get("payload")
    if pl:
        P.append({"title": "Python: big items echoed, 4 workers",
                  "unit": "MB/s each way (higher is better)",
                  "series": ["%s of %s" % (x["kind"],
                                           fmt_bytes(x["size"]))
                             for x in pl["rows"]],
                  "rows": [(lab_, [med(x["impls"][k]["mb_per_s"])
                                   for x in pl["rows"]],
                            "gpupool-run" if k == "gpupool" else k)
                           for k, lab_ in pl["labels"].items()]})
    return P


def panels_mpi(mp):
    """Dispatch over MPI."""
    P = []
    P.append({"title": "gpupool-run, %d MPI ranks: dispatch" %
                       mp["ranks"],
              "unit": "null tasks/s (higher is better)", "ref": 20000.0,
              "rows": [("in all (rank 0's slots too)", med(mp["per_s"]),
                        "gpupool-run"),
                       ("over MPI (ranks 1-%d)" % (mp["ranks"] - 1),
                        med(mp["mpi_per_s"]), "gpupool-run")]})
    return P


def plot(res, path):
    P = panels(res)
    try:
        if os.environ.get("GPUPOOL_BENCH_SVG"):
            raise ImportError("GPUPOOL_BENCH_SVG is set")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        svg_plot(res, P, path)
        return "hand-written SVG (matplotlib not importable)"
    plt.rcParams.update({"font.size": 8, "svg.fonttype": "none",
                         "svg.hashsalt": "gpupool-bench"})
    cols = 4
    rows = (len(P) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.2 * rows),
                             squeeze=False)
    for ax, p in zip(axes.flat, P):
        series = p.get("series", [None])
        labels = [r[0] for r in p["rows"]][::-1]
        h = 0.8 / len(series)
        vals_all = []
        for si, sname in enumerate(series):
            vals, colors, ys = [], [], []
            for i, r in enumerate(p["rows"][::-1]):
                v = r[1][si] if isinstance(r[1], list) else r[1]
                if not v:
                    continue
                vals.append(v)
                colors.append(color_for(r[2], si))
                ys.append(i - (si - (len(series) - 1) / 2) * h)
            vals_all += vals
            bars = ax.barh(ys, vals, height=h * 0.92, color=colors,
                           label=sname)
            for b, v in zip(bars, vals):
                ax.text(b.get_width(), b.get_y() + b.get_height() / 2,
                        " " + short(v), va="center", fontsize=6.5)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_title(p["title"], fontsize=8.5, loc="left")
        ax.set_xlabel(p["unit"], fontsize=7)
        if p.get("log"):
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(ticker.LogLocator(base=10))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(
                lambda v, _: short(v)))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            if vals_all:
                ax.set_xlim(min(vals_all) / 2, max(vals_all) * 6)
        else:
            ax.set_xlim(0, max(vals_all + [p.get("ref") or 0]) * 1.22
                        if vals_all else 1)
        if p.get("ref"):
            ax.axvline(p["ref"], color="#333333", lw=0.7, ls="--")
        if series[0] is not None:
            ax.legend(fontsize=6.5, loc="best", framealpha=0.8)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    for ax in list(axes.flat)[len(P):]:
        ax.axis("off")
    m = res["machine"]
    fig.suptitle("gpupool against the alternatives - %s, %d cores, %s - %s%s"
                 "   (red: gpupool, grey: raw lower bounds, blue: others; "
                 "dashed: target or ideal)" % (
                     m["cpu"], m["cores"], m["distro"], res["date"],
                     " (--quick)" if res["quick"] else ""), fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return "matplotlib " + matplotlib.__version__


def short(v):
    if v < 0.1:
        return "%.3f" % v
    if v >= 1e6:
        return "%.1fM" % (v / 1e6)
    if v >= 1e4:
        return "%.0fk" % (v / 1e3)
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def svg_plot(res, P, path):
    """The same panels, as plain SVG, for machines without matplotlib."""
    import math
    cols, pw, ph, left = 4, 420, 300, 175
    rows = (len(P) + cols - 1) // cols
    W, H = cols * pw, rows * ph + 40
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="10">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>']
    m = res["machine"]
    o.append('<text x="10" y="22" font-size="14">gpupool against the '
             'alternatives - %s, %d cores, %s - %s%s (red: gpupool, grey: raw '
             'lower bounds, blue: others; dashed: target or ideal)</text>' % (
                 esc(m["cpu"]), m["cores"], esc(m["distro"]), res["date"],
                 " (--quick)" if res["quick"] else ""))
    for i, p in enumerate(P):
        x0, y0 = (i % cols) * pw, 40 + (i // cols) * ph
        o.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (
            x0 + 10, y0 + 14, esc(p["title"])))
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (
            x0 + left, y0 + ph - 12, esc(p["unit"])))
        series = p.get("series", [None])
        vals = [v for r in p["rows"] for v in
                (r[1] if isinstance(r[1], list) else [r[1]]) if v]
        if not vals:
            continue
        vmax = max(vals + [p.get("ref") or 0])
        log_ = p.get("log")
        lo = 10 ** math.floor(math.log10(min(vals))) if log_ else 0
        span = pw - left - 60

        def X(v):
            if log_:
                return span * (math.log10(v) - math.log10(lo)) / max(
                    1e-9, math.log10(vmax * 1.05) - math.log10(lo))
            return span * v / (vmax * 1.05)
        n = len(p["rows"])
        rowh = (ph - 50) / n
        bh = rowh * 0.8 / len(series)
        for ri, r in enumerate(p["rows"]):
            y = y0 + 24 + ri * rowh
            o.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (
                x0 + left - 4, y + rowh / 2 + 3, esc(r[0])))
            for si in range(len(series)):
                v = r[1][si] if isinstance(r[1], list) else r[1]
                if not v:
                    continue
                by = y + rowh * 0.1 + si * bh
                o.append('<rect x="%d" y="%.1f" width="%.1f" height="%.1f" '
                         'fill="%s"/>' % (x0 + left, by, max(1, X(v)),
                                          bh * 0.92, color_for(r[2], si)))
                o.append('<text x="%.1f" y="%.1f" font-size="8">%s%s</text>'
                         % (x0 + left + X(v) + 3, by + bh * 0.7, short(v),
                            "" if series[0] is None else " (%s)" %
                            esc(series[si])))
        if p.get("ref"):
            rx = x0 + left + X(p["ref"])
            o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" '
                     'stroke="#333" stroke-dasharray="3,2"/>' % (
                         rx, y0 + 20, rx, y0 + ph - 28))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))
