"""Host-wide GPU claims from Python (docs/python.md, "Claims"): scripts
that call gpupool.claim() and Pools in several processes on the same 4
fake GPUs never share one, a SIGKILLed holder's GPU goes to the next
waiter, release() gives it back (and is refused once CUDA was loaded),
Ctrl-C ends a wait, and claims() names holders and waiters.

Every case runs its processes with a claims directory of its own
(tmp_path) and a deadline; what they record (GPU, CLOCK_MONOTONIC times,
which every process shares) is checked after. No bound is on how fast
things go but the hand-over's, which is generous (a loaded 2-core CI).

Each case must fail without claims: GPUPOOL_TEST_CLAIMS=none runs them
all with claims off (claim() then raises ValueError; pools overlap).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import gpupool

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))
DEADLINE = 240
HANDOVER_MAX = 10.0  # seconds: measured ~0.01 s; CI is slow, not broken


@pytest.fixture
def claims_dir(tmp_path):
    """The case's claims directory (GPUPOOL_TEST_CLAIMS=none: claims off,
    to see the case fail)."""
    over = os.environ.get("GPUPOOL_TEST_CLAIMS")
    if over:
        return over
    d = tmp_path / "claims"
    d.mkdir()
    return str(d)


def _env(claims_dir):
    env = dict(os.environ, PYTHONPATH=PKG_DIR, GPUPOOL_CLAIMS=claims_dir)
    for k in ("GPUPOOL_FAKE_GPUS", "GPUPOOL_CLAIMED", "GPUPOOL_TASK",
              "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)
    return env


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _start(path, env, *args, stdin=None):
    # A session of its own: a hung script's children go with it.
    return subprocess.Popen([sys.executable, path] + [str(a) for a in args],
                            env=env, text=True, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def _finish(procs, deadline=DEADLINE):
    """Wait for every process (killing all past the deadline): their
    (rc, stdout, stderr)."""
    end = time.monotonic() + deadline
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=max(1, end - time.monotonic()))
            out.append((p.returncode, o, e))
    except subprocess.TimeoutExpired:
        pytest.fail("hung past %d s" % deadline)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return out


def _kill(procs):
    for p in procs:
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()


def _line(p, want):
    """Read p's stderr up to a line containing want (bounded by p's
    deadline: it exits, or the test's killpg in finally)."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if want in line:
            return line
    pytest.fail("never said %r; stderr:\n%s" % (want, "".join(seen)))


def _overlaps(spans):
    """Pairs of (gpu, start, end, who) spans of different owners on one
    GPU that overlap in time."""
    bad = []
    spans = sorted(spans)
    for i, (g, s, e, who) in enumerate(spans):
        for g2, s2, e2, who2 in spans[i + 1:]:
            if g2 != g or s2 >= e:
                break
            if who2 != who:
                bad.append(((g, s, e, who), (g2, s2, e2, who2)))
    return bad


CLAIMER = """\
    import json, os, sys, time
    import gpupool
    c = gpupool.claim(fake_gpus=4)
    t0 = time.monotonic()
    time.sleep(0.02)
    print(json.dumps(dict(pid=os.getpid(), gpus=c.gpus,
                          visible=os.environ["CUDA_VISIBLE_DEVICES"],
                          order=os.environ["CUDA_DEVICE_ORDER"],
                          start=t0, end=time.monotonic())))
"""


def test_100_claim_scripts_at_most_4_at_once(tmp_path, claims_dir):
    path = _script(tmp_path, "job.py", CLAIMER)
    env = _env(claims_dir)
    procs = [_start(path, env) for _ in range(100)]
    res = _finish(procs)
    bad = [(rc, e) for rc, _, e in res if rc != 0]
    assert not bad, "%d of 100 failed, first: %s" % (len(bad), bad[0][1])
    runs = [json.loads(o) for _, o, _ in res]
    for r in runs:
        assert len(r["gpus"]) == 1 and r["visible"] == r["gpus"][0]
        assert r["visible"] in ("fake0", "fake1", "fake2", "fake3")
        assert r["order"] == "PCI_BUS_ID"
    spans = [(r["visible"], r["start"], r["end"], r["pid"]) for r in runs]
    bad = _overlaps(spans)
    assert not bad, "%d pairs of scripts on one GPU at once: %s" % (
        len(bad), bad[:3])
    # At most 4 at once, whichever GPUs: the most spans open at a time.
    events = sorted([(s, 1) for _, s, _, _ in spans] +
                    [(e, -1) for _, _, e, _ in spans])
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    assert most <= 4


POOLER = """\
    import json, os, sys, time
    import gpupool

    def item(i):
        t0 = time.monotonic()
        time.sleep(0.1)
        return (os.getpid(), os.environ["CUDA_VISIBLE_DEVICES"], t0,
                time.monotonic())

    if __name__ == "__main__":
        gpus = sys.argv[1]
        with gpupool.Pool(fake_gpus=4, gpus=gpus.split(",")) as p:
            out = p.map(item, range(8), chunksize=1)
        print(json.dumps(out))
"""


def test_pools_in_several_processes_never_share_a_gpu(tmp_path, claims_dir):
    path = _script(tmp_path, "pool.py", POOLER)
    env = _env(claims_dir)
    sets = ["0,1,2,3", "0,1", "1,2", "2,3", "3", "0,1,2,3"]
    procs = [_start(path, env, s) for s in sets]
    res = _finish(procs)
    assert all(rc == 0 for rc, _, _ in res), [e for _, _, e in res]
    spans = []
    for k, (_, o, _) in enumerate(res):
        items = json.loads(o)
        assert len(items) == 8
        want = {"fake" + g for g in sets[k].split(",")}
        assert {gpu for _, gpu, _, _ in items} <= want
        spans += [(gpu, s, e, k) for _, gpu, s, e in items]
    bad = _overlaps(spans)
    assert not bad, "%d pairs of items of different pools on one GPU at " \
        "once: %s" % (len(bad), bad[:3])


HOLDER = """\
    import sys, time
    import gpupool
    if sys.argv[1] == "pool":
        p = gpupool.Pool(fake_gpus=1)
    else:
        gpupool.claim(fake_gpus=1)
    print("holding", file=sys.stderr, flush=True)
    time.sleep(600)
"""

WAITER = """\
    import sys, time
    import gpupool
    gpupool.claim(fake_gpus=1, timeout=float(sys.argv[1]))
    print(time.monotonic(), flush=True)
"""


@pytest.mark.parametrize("holder", ["claim", "pool"])
def test_sigkill_of_holder_hands_the_gpu_over(tmp_path, claims_dir, holder):
    env = _env(claims_dir)
    h = _start(_script(tmp_path, "holder.py", HOLDER), env, holder)
    w = None
    try:
        _line(h, "holding")
        w = _start(_script(tmp_path, "waiter.py", WAITER), env, DEADLINE)
        said = _line(w, "waiting for 1 GPU")
        assert "pid %d" % h.pid in said  # the holder, named
        who = gpupool.claims(claims_dir)
        assert [(c.gpu, c.queue, c.pid) for c in who] == [
            ("fake0", 0, h.pid), ("fake0", 1, w.pid)]
        assert who[0].command.startswith("python") and who[0].mem is None
        assert abs(time.time() - who[1].since.timestamp()) < DEADLINE
        t_kill = time.monotonic()
        os.kill(h.pid, signal.SIGKILL)
        (rc, out, err), = _finish([w])
        assert rc == 0, err
        took = float(out) - t_kill
        print("%s holder SIGKILLed: the waiter had the GPU %.3f s later"
              % (holder, took))
        assert took < HANDOVER_MAX
    finally:
        _kill([h, w])


RELEASER = """\
    import ctypes, shutil, sys, time
    import gpupool
    c = gpupool.claim(fake_gpus=1)
    print("holding", file=sys.stderr, flush=True)
    sys.stdin.readline()
    assert c.release() is True and not c.held
    print("released", file=sys.stderr, flush=True)
    assert c.release() is False
    c = gpupool.claim(fake_gpus=1)  # behind the waiter: after it exits
    # A stand-in for CUDA: any library mapped as libcuda.so.1.
    lib = sys.argv[1] + "/libcuda.so.1"
    shutil.copy(gpupool._gpupool.__file__, lib)
    ctypes.CDLL(lib)
    try:
        c.release()
    except RuntimeError as e:
        print("refused:", e, flush=True)
    assert c.held
"""


def test_release_hands_over_and_is_refused_after_cuda(tmp_path, claims_dir):
    env = _env(claims_dir)
    r = _start(_script(tmp_path, "rel.py", RELEASER), env, tmp_path,
               stdin=subprocess.PIPE)
    w = None
    try:
        _line(r, "holding")
        w = _start(_script(tmp_path, "waiter.py", WAITER), env, DEADLINE)
        _line(w, "waiting for 1 GPU")
        r.stdin.write("\n")
        r.stdin.flush()
        (rc, out, err), = _finish([w])
        assert rc == 0, err  # while the releaser still lives
        (rc, out, err), = _finish([r])
        assert rc == 0, err
        assert "refused: CUDA was loaded in this process" in out
    finally:
        _kill([r, w])


@pytest.mark.parametrize("bad", ["", 5, b""])
def test_a_bad_claims_directory_is_named_with_its_choices(bad):
    """Pool(claims=) takes a path, "none" or None; anything else is a
    ValueError naming the keyword, the value and what it may be (the
    row's help says "none" turns claims off), before anything starts."""
    with pytest.raises(ValueError) as e:
        gpupool.Pool(fake_gpus=1, claims=bad)
    msg = str(e.value)
    assert msg.startswith("claims=%r: must be a path" % (bad,)), msg
    assert '"none": no claims' in msg, msg
