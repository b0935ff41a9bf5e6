#!/usr/bin/env python3
"""mutate.py: do the tests catch the behaviours design.md promises broken?

    mutate.py [--work DIR] [--only NAME...] [--no-baseline] [SRCROOT]
    mutate.py --check [SRCROOT]      every mutant still applies (no build)
    mutate.py --list [SRCROOT]

Each mutant in mutants.py is one line of the tree changed the way a
careless edit would change it (a bound off by one, a call dropped, a
flag ignored), with the invariant of docs/design.md it breaks and the
tests that must catch it. For each: apply it to a copy of the tree
(SRCROOT, by default the tree this script is in: its tracked and
untracked, not ignored, files), build the copy, run those tests, undo
it. A mutant is caught when some of its tests fail; the run fails
unless every mutant is caught. The tests run once unmutated first
(--no-baseline skips that): a test that fails anyway catches nothing.

A mutant names its line by a fragment that must occur on exactly one
line of its file, so edits elsewhere in the file leave it working; when
the fragment is gone or no longer unique the run stops at once and says
which mutant to update (--check does only that, in the docs suite).

--work DIR keeps the copy and its build in DIR (made if missing) so a
second run builds only what changed. The run takes about a minute a
mutant on 2 cores.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mutants import MUTANTS  # noqa: E402


class Stale(Exception):
    pass


def locate(root, m):
    """The index of the one line of m's file holding m's fragment."""
    path = os.path.join(root, m["file"])
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise Stale("%s: %s: %s" % (m["name"], m["file"], e.strerror))
    hits = [i for i, l in enumerate(lines) if m["old"] in l + "\n"]
    if len(hits) != 1:
        raise Stale("%s: %r occurs on %d lines of %s, not 1: update the "
                    "mutant in test/mutants/mutants.py" %
                    (m["name"], m["old"], len(hits), m["file"]))
    return path, lines, hits[0]


def check_all(root):
    bad = []
    names = set()
    for m in MUTANTS:
        if m["name"] in names:
            bad.append("%s: two mutants of that name" % m["name"])
        names.add(m["name"])
        try:
            locate(root, m)
        except Stale as e:
            bad.append(str(e))
        if m["old"] == m["new"] or not m["tests"]:
            bad.append("%s: changes nothing or names no test" % m["name"])
    return bad


def copy_tree(src, dst):
    files = subprocess.run(
        ["git", "-C", src, "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"], check=True,
        stdout=subprocess.PIPE).stdout.decode().split("\0")
    for f in files:
        if not f or not os.path.isfile(os.path.join(src, f)):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
        s, d = os.path.join(src, f), os.path.join(dst, f)
        if os.path.exists(d) and open(s, "rb").read() == open(d, "rb").read():
            continue    # unchanged: ninja keeps what it built from it
        shutil.copy2(s, d)


def sh(cmd, log, timeout=None):
    with open(log, "ab") as f:
        f.write(("\n$ %s\n" % " ".join(cmd)).encode())
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def test_cmd(build, tests):
    cmd = ["meson", "test", "-C", build, "--no-rebuild", "-q",
           "--setup", "full"]
    for t in tests:
        cmd += ["--suite", t[6:]] if t.startswith("suite:") else [t]
    return cmd


def why(build, work, name, rc):
    """The first failure the tests reported (a Check assertion, else a
    failed test's name), to tell a mutant caught for its reason from one
    that broke something else; the whole test log is kept in
    WORK/logs/NAME.txt."""
    src = os.path.join(build, "meson-logs", "testlog-full.txt")
    if rc == 0 or not os.path.exists(src):
        return ""
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    shutil.copyfile(src, os.path.join(work, "logs", name + ".txt"))
    with open(src, errors="replace") as f:
        text = f.read()
    m = re.search(r"^\S+\.c:\d+:[EF]:.*$", text, re.M) or \
        re.search(r"^(FAIL|E) .*$", text, re.M) or \
        re.search(r"^.* (FAIL|TIMEOUT) .*$", text, re.M)
    return ": " + m.group(0).strip()[:150] if m else ""


def run(args):
    src = os.path.abspath(args.srcroot)
    bad = check_all(src)
    if bad:
        print("\n".join(bad))
        return 2
    todo = [m for m in MUTANTS if not args.only or m["name"] in args.only]
    if args.only and len(todo) != len(args.only):
        print("no mutant named %s" % ", ".join(
            set(args.only) - {m["name"] for m in todo}))
        return 2
    work = args.work or tempfile.mkdtemp(prefix="gp-mutants-")
    tree, build = os.path.join(work, "tree"), os.path.join(work, "build")
    log = os.path.join(work, "log")
    os.makedirs(tree, exist_ok=True)
    copy_tree(src, tree)
    print("copy in %s, log in %s" % (tree, log))
    if not os.path.isdir(os.path.join(build, "meson-private")) and \
            sh(["meson", "setup", build, tree], log) != 0:
        print("meson setup failed: see %s" % log)
        return 2
    if sh(["ninja", "-C", build], log) != 0:
        print("the unmutated copy does not build: see %s" % log)
        return 2
    if not args.no_baseline:
        tests = sorted({t for m in todo for t in m["tests"]})
        if sh(test_cmd(build, tests), log, 3600) != 0:
            print("the unmutated tree fails %s: see %s" % (tests, log))
            return 2
    caught = 0
    for m in todo:
        path, lines, i = locate(tree, m)
        orig = "\n".join(lines)
        lines[i] = (lines[i] + "\n").replace(m["old"], m["new"], 1)[:-1]
        t0 = time.monotonic()
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            if sh(["ninja", "-C", build], log) != 0:
                print("%-40s inv %-3s DOES NOT BUILD: fix the mutant (%s)" %
                      (m["name"], m["inv"], log))
                return 2
            rc = sh(test_cmd(build, m["tests"]), log, m.get("timeout", 1200))
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(orig)
        caught += rc != 0
        print("%-40s inv %-3s %s (%.0f s)%s" % (
            m["name"], m["inv"], "caught" if rc != 0 else "SURVIVED",
            time.monotonic() - t0, why(build, work, m["name"], rc)),
            flush=True)
    sh(["ninja", "-C", build], log)
    print("%d of %d mutants caught" % (caught, len(todo)))
    if not args.work:
        shutil.rmtree(work)
    return 0 if caught == len(todo) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("srcroot", nargs="?",
                    default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--work")
    ap.add_argument("--only", nargs="+")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for m in MUTANTS:
            print("%-40s inv %-3s %s: %s" % (m["name"], m["inv"], m["file"],
                                           " ".join(m["tests"])))
        return 0
    if args.check:
        bad = check_all(os.path.abspath(args.srcroot))
        print("\n".join(bad) if bad else
              "%d mutants, each on one line of its file" % len(MUTANTS))
        return 1 if bad else 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
