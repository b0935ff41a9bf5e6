#!/usr/bin/env python3
"""gpupool's benchmark harness: gpupool-run and pool_map against what people
use instead, on the same work, on this machine, in one run.

    python3 bench/run.py [--quick] [--install-peers] [--out DIR]
                         [--build DIR] [--no-build] [--publish]
                         [--sections cmd,pool,mpi,python,ranks,claims,
                                     integrations]
                         [--python PY]

Writes DIR/results.json (machine, versions, git revision, every figure with
median, min and max over repeats), DIR/results.md (tables, targets with
PASS/MISS) and DIR/results.svg (the plot). DIR defaults to bench/results/
(git-ignored). --publish also copies the table and the plot into
docs/benchmarks.md and docs/benchmarks.svg. See bench/README.md for what
each figure measures and how.

Every comparison is a ratio of runs interleaved in the same pass (each
round runs every contender once, in a rotated order), and the median of
the per-round ratios is quoted. Peers that are not installed are skipped
with a note; --install-peers installs the Debian ones first (GNU parallel,
task-spooler) with apt-get, and the Python ones (loky, mpire, numpy, and
scipy for the warm rows' real import, mpi4py for the ranks section, and
hydra-core, hydra-joblib-launcher and joblib for the integrations section)
with pip into the bench's venv.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

# The harness's modules lie beside this file (test/bench/paths.py loads
# this file by path, so its directory is not on sys.path by itself).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import FULL, HERE, NOTES, QUICK, REPO, T0, log  # noqa: E402
from machine import (build_info, do_build, git_info, machine_info,  # noqa
                     versions)
from peers import install_peers, make_runners  # noqa: E402
from plots import plot  # noqa: E402
from report import held_cell, markdown, publish  # noqa: E402
from sec_claims import claims_section  # noqa: E402
from sec_cmd import cmd_section  # noqa: E402
from sec_integrations import integrations_section  # noqa: E402
from sec_mpi import mpi_section  # noqa: E402
from sec_pool import pool_section  # noqa: E402
from sec_python import python_section  # noqa: E402
from sec_ranks import ranks_section  # noqa: E402
from supervise import become_subreaper  # noqa: E402
from targets import targets  # noqa: E402

# What test/bench/paths.py reads of this module.
__all__ = ["REPO", "QUICK", "markdown", "main"]


def arguments():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller N and fewer rounds: under a minute")
    ap.add_argument("--install-peers", action="store_true",
                    help="apt-get install -y parallel task-spooler first")
    ap.add_argument("--out", default=os.path.join(HERE, "results"),
                    help="output directory (default bench/results)")
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"),
                    help="meson build directory (default build-bench/; "
                         "set up with -Dbuildtype=release if missing)")
    ap.add_argument("--no-build", action="store_true",
                    help="use --build as it is; do not run meson/ninja")
    ap.add_argument("--sections",
                    default="cmd,pool,mpi,python,ranks,claims,"
                            "integrations",
                    help="some of cmd, pool, mpi, python, ranks, claims, "
                         "integrations (default: all)")
    ap.add_argument("--python", metavar="PYTHON",
                    default=os.environ.get("GPUPOOL_BENCH_PYTHON"),
                    help="python, ranks and integrations sections: an "
                         "interpreter that imports "
                         "gpupool (default: $GPUPOOL_BENCH_PYTHON, else "
                         "pip install this tree into BUILD/pyvenv)")
    ap.add_argument("--publish", action="store_true",
                    help="copy the table and plot into docs/benchmarks.*")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only redraw results.md and the plot from a "
                         "results.json")
    return ap.parse_args()


def render(a, md_path, svg_path):
    """--render: the page and the plot again from a results.json."""
    with open(a.render) as f:
        res = json.load(f)
    res["plot"] = plot(res, svg_path)
    md = markdown(res)
    with open(md_path, "w") as f:
        f.write(md)
    if a.publish:
        publish(res, md, svg_path)
    return 0


def prepare(a, cfg, build, notes):
    """The run's record before any section: the machine, the revision and
    the build (built first unless --no-build)."""
    if not become_subreaper():
        notes.append("could not become a child subreaper: detached "
                     "processes (task-spooler's server) are not counted")
    if a.install_peers:
        install_peers(notes)
    if not a.no_build:
        do_build(build)
    if build_info(build)["buildtype"] not in ("release", None):
        notes.append("the build in %s is %s, not release" % (
            build, build_info(build)["buildtype"]))
    return {"schema": 1, "quick": a.quick,
            "command": "python3 bench/run.py" + " ".join(
                [""] + [x for x in sys.argv[1:]]),
            "date": datetime.datetime.now().astimezone().strftime(
                "%Y-%m-%d %H:%M %Z"),
            "machine": machine_info(), "git": git_info(),
            "build": build_info(build), "config": cfg,
            "load_before": list(os.getloadavg()), "notes": notes}


def run_sections(a, cfg, build, res, notes):
    """The sections --sections names, in a scratch directory; returns the
    peers that were skipped."""
    sections = a.sections.split(",")
    work = tempfile.mkdtemp(prefix="gpupool-bench-")
    try:
        runners, skipped = make_runners(build, work, notes)
        res["versions"] = versions(build, runners)
        res["peers"] = {r.name: {"status": "ran", "label": r.label,
                                 "note": r.note} for r in runners}
        res["peers"].update({k: {"status": "skipped", "note": v}
                             for k, v in skipped.items()})
        if "cmd" in sections:
            cmd_section(cfg, runners, build, work, res, notes)
        if "pool" in sections:
            pool_section(cfg, build, work, res, notes)
        if "mpi" in sections:
            mpi_section(cfg, build, work, res, notes)
        if "python" in sections:
            python_section(cfg, build, work, res, notes, a.python,
                           a.install_peers)
        if "ranks" in sections:
            ranks_section(cfg, build, work, res, notes, a.python,
                          a.install_peers)
        if "claims" in sections:
            claims_section(cfg, runners, build, work, res, notes)
        if "integrations" in sections:
            integrations_section(cfg, build, work, res, notes, a.python,
                                 a.install_peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return skipped


def main():
    a = arguments()
    os.makedirs(a.out, exist_ok=True)
    md_path = os.path.join(a.out, "results.md")
    svg_path = os.path.join(a.out, "results.svg")
    if a.render:
        return render(a, md_path, svg_path)
    cfg = QUICK if a.quick else FULL
    build = os.path.abspath(a.build)
    notes = NOTES
    res = prepare(a, cfg, build, notes)
    skipped = run_sections(a, cfg, build, res, notes)
    res["load_after"] = list(os.getloadavg())
    res["duration_s"] = round(time.monotonic() - T0, 1)
    res["targets"] = targets(res, skipped)
    res["plot"] = plot(res, svg_path)
    md = markdown(res)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(md_path, "w") as f:
        f.write(md)
    print(md)
    print()
    for t in res["targets"]:
        print("%-4s  %-70s %s, held %s%s" % (
            t["status"], t["target"], t["shown"], held_cell(t),
            "  (%s)" % t["context"] if t.get("context") else ""))
    log("done in %.0f s: %s" % (res["duration_s"], a.out))
    if a.publish:
        publish(res, md, svg_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
