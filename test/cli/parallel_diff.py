#!/usr/bin/env python3
"""parallel_diff.py: gpupool-run against GNU parallel, the oracle.

    parallel_diff.py GPUPOOL_RUN CORPUS [-v] [-k CASE...]

Each line of CORPUS (parallel_corpus.txt) is an invocation taken from
GNU parallel's own documentation (parallel_tutorial(7),
parallel_examples(7), parallel(1)), run twice in a fresh directory of
its own holding the files those pages assume (abc-file, num30000, ...):
once with `parallel` the real GNU parallel, once with `parallel`
gpupool-run. A case with -j N (or none: 2) runs parallel -jN and
gpupool-run --fake-gpus N. Both are started from bash, so both take it
as the shell their tasks run in. Compared: the lines of standard output
(as a multiset; in order with -k or one slot), the exit status, the
files the run leaves in its directory (names and bytes), and the rows
of any joblog there (Seq, Exitval, Signal and Command, its quotes left
out, as each tool quotes arguments its own way; gpupool-run's GPU
columns are its own). Standard error is not compared: each tool writes
its own notices there.

A case is marked:
  =        the two must agree;
  R:KEY    gpupool-run refuses it, on purpose: exit 255, one line on
           standard error, nothing run;
  D:KEY    it differs on purpose, and says so: the two must differ
           (a case that starts to agree is reported, so that the table
           can say so).
Each KEY must be a row of the table DIFFERENCES FROM GNU PARALLEL in
docs/gpupool-run.1 (checked). Every run is bounded (TIMEOUT seconds);
the cases run four at a time. Exit status: 0 all hold, 1 otherwise, 77
(skipped) when GNU parallel is not installed.
"""
import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

TIMEOUT = 40
PARALLEL = shutil.which("parallel", path="/usr/bin:/usr/local/bin:/bin")

# The files parallel_tutorial(7) and the examples assume, made in each
# case's directory; every mtime fixed, so that gzip makes the same bytes.
SETUP = r"""
printf 'A\nB\nC\n' > abc-file
printf 'D\nE\nF\n' > def-file
printf 'A\0B\0C\0' > abc0-file
printf 'A_B_C_' > abc_-file
printf 'f1\tf2\nA\tB\nC\tD\n' > tsv-file.tsv
seq 8 > num8; seq 128 > num128; seq 30000 > num30000
(echo %head1; echo %head2; seq 10) > num_%header
for f in index about news; do echo "<p>$f</p>" > $f.html; done
for f in a b c; do echo "log $f" > $f.log; done
for f in x y; do echo "gz $f" > $f; gzip -n $f; done
echo one > file1; echo two > file2
mkdir -p destdir dir1 dir2 sub/deep Mixed_Dir; touch dir1/f dir2/f dir2/g
printf 'file1\nnothere\nfile2\n' > file_list
printf 'a\nb\nc\nd\n' > in.txt
printf 'in1\tout1\nin2\tout2\n' > table_file.tsv
printf 'line one\nline two\nline three\n' > textfile
printf 'l1\nl2\nl3\n' > list; printf 'x1\nx2\n' > xlist; printf 'y1\ny2\n' > ylist
printf 'echo job1\necho job2\nexit 3\necho job4\n' > jobs_to_run
touch foo.es.txt bar.es.txt
printf 'Name\tE-mail address\nTom\tt@x.org\nAnn\ta@x.org\n' > people.tsv
find . -exec touch -h -d @1000000000 {} +
"""


def load(corpus):
    cases = []
    with open(corpus, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            mark, _, cmd = line.partition("\t")
            cases.append((no, mark.strip(), cmd.strip()))
    return cases


def slots(cmd):
    m = re.search(r"(?:^|\s)(?:-j\s*|--jobs[= ]|-P\s*)(\d+)(?=\s)", cmd)
    return int(m.group(1)) if m else 2


def wrapper(d, tool, gpr, j):
    b = os.path.join(d, ".bin")
    os.mkdir(b)
    w = os.path.join(b, "parallel")
    with open(w, "w") as f:
        if tool == "parallel":
            f.write('#!/bin/bash\n"%s" -j%d "$@"\n' % (PARALLEL, j))
        else:
            f.write('#!/bin/bash\n"%s" --fake-gpus %d "$@"\n' % (gpr, j))
    os.chmod(w, 0o755)
    return b


def snapshot(d):
    files = {}
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if x not in (".bin", ".home")]
        for n in names + [x + "/" for x in dirs]:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d) + ("/" if n.endswith("/") else "")
            if n.endswith("/"):
                files[rel] = b""
                continue
            try:
                with open(p, "rb") as f:
                    files[rel] = f.read()
            except OSError:
                files[rel] = None
    return files


def joblog_rows(data):
    """(Seq, Exitval, Signal, Command without quotes) of each record."""
    rows = []
    text = data.decode("utf-8", "replace").split("\n")
    for line in text[1:]:
        if not line:
            continue
        f = line.split("\t")
        if len(f) < 9:
            rows.append(("torn", line))
            continue
        cmd = f[8] if len(f) > 9 else "\t".join(f[8:])
        cmd = cmd.replace("\\t", "\t").replace("\\n", "\n")
        rows.append((f[0], f[6], f[7], re.sub(r"['\"\\]", "", cmd)))
    return sorted(rows)


def run(tool, gpr, cmd, j):
    d = tempfile.mkdtemp(prefix="pdiff-")
    try:
        home = os.path.join(d, ".home")
        os.makedirs(os.path.join(home, ".parallel"))
        open(os.path.join(home, ".parallel", "will-cite"), "w").close()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PARALLEL", "GPUPOOL_"))}
        env.update(HOME=home, LC_ALL="C", TMPDIR=d,
                   PATH=wrapper(d, tool, gpr, j) + ":" + env["PATH"])
        subprocess.run(["bash", "-c", SETUP], cwd=d, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = snapshot(d)
        p = subprocess.Popen(["bash", "-c", cmd], cwd=d, env=env,
                             stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return {"rc": "timeout", "out": out, "err": err, "files": {},
                    "logs": {}}
        after = snapshot(d)
        files, logs = {}, {}
        for k, v in after.items():
            if v is not None and v.startswith(b"Seq\tHost\tStarttime\t"):
                logs[k] = joblog_rows(v)
            elif before.get(k) != v:
                files[k] = v
        gone = sorted(set(before) - set(after))
        for k in gone:
            files[k] = "(removed)"
        return {"rc": p.returncode, "out": out, "err": err, "files": files,
                "logs": logs}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def lines(b):
    return b.decode("utf-8", "replace").splitlines()


def differences(cmd, j, a, b):
    """What differs between parallel's run a and gpupool-run's b."""
    why = []
    ordered = j == 1 or re.search(r"(?:^|\s)-[a-zA-Z0]*k|--keep-order", cmd)
    la, lb = lines(a["out"]), lines(b["out"])
    if (la != lb) if ordered else (sorted(la) != sorted(lb)):
        why.append("stdout: parallel %r, gpupool-run %r" % (la[:8], lb[:8]))
    if a["rc"] != b["rc"]:
        why.append("exit status: parallel %s, gpupool-run %s" %
                   (a["rc"], b["rc"]))
    if a["files"] != b["files"]:
        keys = sorted(set(a["files"]) ^ set(b["files"]) |
                      {k for k in a["files"] if a["files"].get(k) !=
                       b["files"].get(k)})
        why.append("files differ: %s" % keys[:6])
    if a["logs"] != b["logs"]:
        why.append("joblog rows: parallel %s, gpupool-run %s" %
                   (a["logs"], b["logs"]))
    return why


def check(case, gpr):
    no, mark, cmd = case
    j = slots(cmd)
    b = run("gpupool-run", gpr, cmd, j)
    if mark.startswith("R:"):
        errl = lines(b["err"])
        if b["rc"] != 255 or len(errl) != 1 or b["out"] or b["files"]:
            return no, cmd, ["not refused: exit %s, stderr %r, stdout %r, "
                             "files %s" % (b["rc"], errl[:3],
                                           lines(b["out"])[:3],
                                           sorted(b["files"])[:4])]
        return no, cmd, []
    a = run("parallel", gpr, cmd, j)
    why = differences(cmd, j, a, b)
    if mark.startswith("D:"):
        return no, cmd, [] if why else ["agrees now: mark it '='"]
    if b["rc"] == "timeout" or a["rc"] == "timeout":
        why.append("timed out")
    return no, cmd, why


def table_keys(man):
    """The keys of the man page's DIFFERENCES FROM GNU PARALLEL table."""
    with open(man, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"\.SH DIFFERENCES FROM GNU PARALLEL\n(.*?)\n\.SH ",
                  text, re.S)
    return set(re.findall(r"^\.\\\" key: (\S+)", m.group(1), re.M)) \
        if m else set()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    verbose = "-v" in sys.argv
    if PARALLEL is None:
        print("SKIP: GNU parallel is not installed (.ci/setup installs it)")
        return 77
    gpr, corpus = os.path.abspath(args[0]), args[1]
    man = os.path.join(os.path.dirname(corpus), "..", "..", "docs",
                       "gpupool-run.1")
    cases = load(corpus)
    only = set(int(x) for x in args[2:])
    if only:
        cases = [c for c in cases if c[0] in only]
    keys = table_keys(man)
    bad = 0
    for no, mark, cmd in cases:
        if mark != "=" and mark[2:] not in keys:
            print("line %d: key '%s' is not in gpupool-run(1)'s table" %
                  (no, mark))
            bad += 1
    counts = {"=": 0, "R": 0, "D": 0}
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for no, cmd, why in ex.map(lambda c: check(c, gpr), cases):
            mark = [c for c in cases if c[0] == no][0][1]
            if why:
                bad += 1
                print("FAIL line %d: %s\n    %s" % (no, cmd,
                                                    "\n    ".join(why)))
            else:
                counts[mark[0]] += 1
                if verbose:
                    print("ok   line %d: %s" % (no, cmd))
    print("%d invocations: %d agree, %d refused on purpose, %d differ on "
          "purpose, %d failed" % (len(cases), counts["="], counts["R"],
                                  counts["D"], bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
