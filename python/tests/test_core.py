"""Tests of gpupool._gpupool, the C extension, on fake GPUs.

Run: python -m pytest -q python/tests (after pip install .). No test
waits on a sleep: where something must happen during a map, the workers
and the test meet on pipes. The only clock is the pool's own per-item
timeout (test_timeout).
"""
import ctypes
import json
import os
import select
import signal
import threading

import pytest

import gpupool._gpupool as g
from cpool import pmap


def children():
    """Pids of this process's live children (all threads)."""
    pids = set()
    for t in os.listdir('/proc/self/task'):
        try:
            with open('/proc/self/task/%s/children' % t) as f:
                pids.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            pass
    return pids


@pytest.fixture(autouse=True)
def no_child_left():
    before = children()
    yield
    assert children() <= before


def double(b):
    return str(int(b) * 2).encode()


def test_map_order_and_values():
    with g.Pool(double, fake_gpus=2) as p:
        n = 10 ** 4
        r = pmap(p, [str(i).encode() for i in range(n)])
        assert len(r) == n
        assert all(s == g.OK and c == 0 for s, c, _ in r)
        assert [int(o) for _, _, o in r] == [2 * i for i in range(n)]
        assert pmap(p, []) == []


def test_worker_returns_none_and_empty():
    with g.Pool(lambda b: b'', fake_gpus=1) as p:
        assert pmap(p, [b'x', b'']) == [(g.OK, 0, b''), (g.OK, 0, b'')]


def test_environ_in_worker_and_init():
    seen = {}

    def init():
        seen['init'] = (os.environ.get('CUDA_VISIBLE_DEVICES'),
                        os.environ.get('CUDA_DEVICE_ORDER'))

    def where(b):
        return json.dumps({
            'init': seen['init'],
            'env': os.environ.get('CUDA_VISIBLE_DEVICES'),
            'getenv': os.getenv('CUDA_VISIBLE_DEVICES'),
            'cur': g.current(),
            'pid': os.getpid()}).encode()

    assert g.current() is None
    with g.Pool(where, fake_gpus=3, init=init) as p:
        info = p.info()
        assert len(info) == p.size() == 3
        for s, _, o in pmap(p, [b''] * 30):
            assert s == g.OK
            d = json.loads(o)
            w = info[d['cur']['worker']]
            assert d['init'] == [w['visible'], 'PCI_BUS_ID']
            assert d['env'] == d['getenv'] == w['visible']
            assert d['cur']['pid'] == d['pid'] == w['pid']
            assert d['cur']['visible'] == w['visible']
    assert 'CUDA_VISIBLE_DEVICES' not in os.environ or \
        os.environ['CUDA_VISIBLE_DEVICES'] != w['visible']


def test_init_raises_is_init_error():
    def init():
        raise ValueError('no model here')

    with pytest.raises(g.InitError, match='ValueError: no model here'):
        g.Pool(double, fake_gpus=2, init=init)


def test_bad_options(monkeypatch):
    with pytest.raises(ValueError):
        g.Pool(double, fake_gpus=2, per_gpu=-1)
    with pytest.raises(ValueError, match='99'):
        g.Pool(double, fake_gpus=2, gpus='99')
    with pytest.raises(TypeError):
        g.Pool(42)
    monkeypatch.setenv('GPUPOOL_FAKE_GPUS', 'abc')
    with pytest.raises(ValueError, match='GPUPOOL_FAKE_GPUS'):
        g.Pool(double)
    monkeypatch.setenv('GPUPOOL_FAKE_GPUS', '2')
    with g.Pool(double, gpus=[1]) as p:
        assert [i['gpu'] for i in p.info()] == [0]
        assert p.info()[0]['visible'] == 'fake1'


def test_fake_gpus_from_environment(monkeypatch):
    monkeypatch.setenv('GPUPOOL_FAKE_GPUS', '3')
    with g.Pool(double) as p:
        assert p.size() == 3


def test_worker_raises_fails_the_item(capfd):
    def f(b):
        if b == b'bad':
            raise KeyError('oops')
        return b

    with g.Pool(f, fake_gpus=1) as p:
        r = pmap(p, [b'a', b'bad', b'c'])
        assert r == [(g.OK, 0, b'a'), (g.FAILED, 1, None), (g.OK, 0, b'c')]
    assert "KeyError: 'oops'" in capfd.readouterr().err


def crash_on(word, how):
    def f(b):
        if b == word:
            how()
        return json.dumps([b.decode(), os.getpid(),
                           os.environ['CUDA_VISIBLE_DEVICES']]).encode()
    return f


def test_segfault_fails_one_item_and_a_replacement_runs_python():
    f = crash_on(b'boom', lambda: ctypes.string_at(0))
    with g.Pool(f, fake_gpus=1) as p:
        first = p.info()[0]['pid']
        r = pmap(p, [b'a', b'boom'] + [b'%d' % i for i in range(50)])
        assert r[1] == (g.CRASHED, 128 + signal.SIGSEGV, None)
        assert r[0][0] == g.OK
        later = [json.loads(o) for _, _, o in r[2:]]
        assert [x[0] for x in later] == ['%d' % i for i in range(50)]
        # The replacement (forked during the map, through the fork hook)
        # runs Python, with its environment in os.environ.
        pids = {x[1] for x in later}
        assert first not in pids and len(pids) == 1
        assert all(x[2] == 'fake0' for x in later)
        r = pmap(p, [b'x', b'y'])
        assert [s for s, _, _ in r] == [g.OK, g.OK]


def test_os_exit_in_worker():
    with g.Pool(crash_on(b'exit', lambda: os._exit(3)), fake_gpus=2) as p:
        r = pmap(p, [b'a', b'exit', b'b'])
        assert r[1] == (g.CRASHED, 3, None)
        assert r[0][0] == r[2][0] == g.OK
        assert all(s == g.OK for s, _, _ in pmap(p, [b'c'] * 10))


def test_sys_exit_in_worker_ends_it():
    import sys
    with g.Pool(crash_on(b'exit', lambda: sys.exit(4)), fake_gpus=1) as p:
        r = pmap(p, [b'exit', b'b'])
        assert r[0] == (g.CRASHED, 4, None)
        assert r[1][0] == g.OK


def test_timeout():
    def f(b):
        if b == b'hang':
            select.select([], [], [])       # forever
        return b

    with g.Pool(f, fake_gpus=2, timeout_ms=1000, grace_ms=50) as p:
        r = pmap(p, [b'a', b'hang', b'b'])
        assert r[1] == (g.TIMEDOUT, -1, None)
        assert r[0] == (g.OK, 0, b'a') and r[2] == (g.OK, 0, b'b')


def test_retries(tmp_path):
    def f(b):
        mark = tmp_path / b.decode()
        if not mark.exists():
            mark.touch()
            os._exit(9)
        return b

    with g.Pool(f, fake_gpus=1, retries=1) as p:
        assert pmap(p, [b'one', b'two']) == [(g.OK, 0, b'one'),
                                             (g.OK, 0, b'two')]
    with g.Pool(f, fake_gpus=1, retries=0) as p:
        assert pmap(p, [b'three']) == [(g.CRASHED, 9, None)]


def test_run_streams_a_generator():
    n = 10 ** 5
    items = ((i, str(i).encode()) for i in range(n))
    got = {}
    state = {'given': 0, 'inflight': 0}

    with g.Pool(double, fake_gpus=2) as p:
        def nxt():
            x = next(items, None)
            if x is not None:
                state['given'] += 1
                state['inflight'] = max(state['inflight'],
                                        state['given'] - len(got))
            return x

        def done(key, status, code, out):
            assert status == g.OK and code == 0
            got[key] = int(out)

        assert p.run(nxt, done) is None
        assert len(got) == n
        assert all(got[i] == 2 * i for i in range(n))
        # next() is asked only when a worker is idle.
        assert state['inflight'] <= p.size()


def test_run_reports_failures_and_keys():
    with g.Pool(crash_on(b'x', lambda: os._exit(5)), fake_gpus=1) as p:
        it = iter([('a', b'a'), (('t', 1), b'x'), (None, b'b')])
        out = []
        p.run(lambda: next(it, None), lambda *a: out.append(a[:3]))
        assert sorted(out, key=repr) == sorted(
            [('a', g.OK, 0), (('t', 1), g.CRASHED, 5), (None, g.OK, 0)],
            key=repr)


def test_run_next_or_done_raising_cancels_and_propagates():
    with g.Pool(double, fake_gpus=2) as p:
        count = [0]

        def nxt():
            count[0] += 1
            if count[0] > 5:
                raise ValueError('stop here')
            return count[0], b'1'

        with pytest.raises(ValueError, match='stop here'):
            p.run(nxt, lambda *a: None)

        def bad_done(*a):
            raise LookupError('done failed')

        it = iter([(i, b'2') for i in range(100)])
        with pytest.raises(LookupError):
            p.run(lambda: next(it, None), bad_done)
        for bad in (('k', 'not bytes'), ['k', b'1'], ('k',)):
            with pytest.raises(TypeError, match='next'):
                p.run(lambda: bad, lambda *a: None)
        assert pmap(p, [b'4']) == [(g.OK, 0, b'8')]


def test_second_map_while_one_runs_is_refused():
    with g.Pool(double, fake_gpus=1) as p:
        errors = []

        def done(*a):
            for call in (lambda: pmap(p, [b'1']), p.close,
                         lambda: p.run(lambda: None, done)):
                try:
                    call()
                except RuntimeError as e:
                    errors.append(str(e))

        it = iter([(0, b'1')])
        p.run(lambda: next(it, None), done)
        assert len(errors) == 3
        # info() from another thread while a call runs: refused; from
        # the calling thread (in done): allowed.
        seen = []

        def done2(*a):
            seen.append(len(p.info()))
            t = threading.Thread(target=lambda: seen.append(
                pytest.raises(RuntimeError, p.info)))
            t.start()
            t.join()

        it = iter([(0, b'1')])
        p.run(lambda: next(it, None), done2)
        assert seen[0] == 1 and 'another thread' in str(seen[1].value)
        assert pmap(p, [b'1']) == [(g.OK, 0, b'2')]


def test_caller_thread_runs_during_map():
    started_r, started_w = os.pipe()
    release_r, release_w = os.pipe()
    count = [0]

    def f(b):
        os.write(started_w, b'.')
        os.read(release_r, 1)       # until the caller's thread lets go
        return b

    def thread(k):
        os.read(started_r, 1)       # an item runs: the map is under way
        for _ in range(100000):
            count[0] += 1
        os.write(release_w, b'.' * k)

    with g.Pool(f, fake_gpus=2) as p:
        k = p.size()
        t = threading.Thread(target=thread, args=(k,))
        t.start()
        r = pmap(p, [b'a'] * k)
        t.join()
    assert [s for s, _, _ in r] == [g.OK] * k
    assert count[0] == 100000
    for fd in (started_r, started_w, release_r, release_w):
        os.close(fd)


def test_keyboard_interrupt_cancels_the_map():
    master = os.getpid()

    def f(b):
        if b == b'int':
            os.kill(master, signal.SIGINT)
            select.select([], [], [])       # until the pool stops it
        return b

    with g.Pool(f, fake_gpus=2, grace_ms=50) as p:
        with pytest.raises(KeyboardInterrupt):
            pmap(p, [b'a', b'int', b'b'])
        assert pmap(p, [b'c', b'd']) == [(g.OK, 0, b'c'), (g.OK, 0, b'd')]
        # A run too: the interrupt is raised by the handler in ctl.
        it = iter([(0, b'int')] + [(i, b'x') for i in range(1, 10)])
        with pytest.raises(KeyboardInterrupt):
            p.run(lambda: next(it, None), lambda *a: None)
        assert pmap(p, [b'e']) == [(g.OK, 0, b'e')]
    assert signal.set_wakeup_fd(-1) == -1


def test_signal_whose_handler_returns_does_not_lose_items():
    master = os.getpid()
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda *a: seen.append(1))
    try:
        def f(b):
            if b == b'usr1':
                os.kill(master, signal.SIGUSR1)
            return b

        with g.Pool(f, fake_gpus=2) as p:
            items = [b'%d' % i for i in range(200)] + [b'usr1'] + \
                [b'%d' % i for i in range(200)]
            r = pmap(p, items)
            assert [o for _, _, o in r] == items
            assert seen
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_close_is_idempotent_and_reaps():
    p = g.Pool(double, fake_gpus=2)
    pids = {i['pid'] for i in p.info()}
    assert pids <= children()
    p.close()
    p.close()
    assert p.closed
    assert not (pids & children())
    with pytest.raises(ValueError):
        pmap(p, [b'1'])


def test_dealloc_reaps():
    p = g.Pool(double, fake_gpus=2)
    pids = {i['pid'] for i in p.info()}
    del p
    assert not (pids & children())


def test_map_takes_contiguous_buffers_only():
    with g.Pool(double, fake_gpus=1) as p:
        with pytest.raises(TypeError):
            pmap(p, ['1'])
        with pytest.raises(BufferError):
            pmap(p, [memoryview(b'1234')[::2]])
        assert pmap(p, (b'1',)) == [(g.OK, 0, b'2')]
        # A view, a bytearray, an mmap's bytes: read where they are, and
        # held until their item ends.
        m = memoryview(b'xx21yy')
        assert pmap(p, [m[2:4], bytearray(b'5')]) == \
            [(g.OK, 0, b'42'), (g.OK, 0, b'10')]
        m.release()


def test_module_constants():
    assert (g.OK, g.FAILED, g.CRASHED, g.TIMEDOUT, g.CANCELED, g.ERROR,
            g.NOTRUN) == tuple(range(7))
    assert 'worker' in g.strerror(-10002)
    assert issubclass(g.InitError, Exception)


def test_max_tasks_recycles_workers():
    with g.Pool(lambda b: b'%d' % os.getpid(), fake_gpus=1,
                max_tasks=3) as p:
        r = pmap(p, [b''] * 10)
        assert all(s == g.OK for s, _, _ in r)
        assert len({o for _, _, o in r}) >= 4


def test_replacements_forked_while_a_caller_thread_runs_python():
    stop = threading.Event()
    n = [0]

    def spin():
        while not stop.is_set():
            n[0] += 1

    f = crash_on(b'c', lambda: os._exit(1))
    with g.Pool(f, fake_gpus=1) as p:
        t = threading.Thread(target=spin)
        t.start()
        try:
            r = pmap(p, [b'c', b'a'] * 5)
        finally:
            stop.set()
            t.join()
        # One worker: each crash was followed by a fork, inside the map.
        assert [s for s, _, _ in r] == [g.CRASHED, g.OK] * 5
        assert pmap(p, [b'b']) == [(g.OK, 0, r[-1][2].replace(b'"a"',
                                                               b'"b"'))]
    assert n[0] > 0


def test_worker_threads_run_between_items():
    go_r, go_w = os.pipe()
    back_r, back_w = os.pipe()

    def init():
        def answer():
            os.write(back_w, os.read(go_r, 1))
        threading.Thread(target=answer, daemon=True).start()

    with g.Pool(lambda b: b, fake_gpus=1, init=init) as p:
        assert pmap(p, [b'1']) == [(g.OK, 0, b'1')]
        # The worker is idle, in the library's C code: its thread runs
        # only if the GIL is free there. (The timeout only turns a hang
        # into a failure.)
        os.write(go_w, b'x')
        assert select.select([back_r], [], [], 60)[0] == [back_r]
        assert os.read(back_r, 1) == b'x'
    for fd in (go_r, go_w, back_r, back_w):
        os.close(fd)


def test_interpreter_exit_closes_pools_and_output_is_written_once():
    import subprocess
    import sys
    code = '''if 1:
        import sys
        import gpupool._gpupool as g
        print("before the pool", end=" ")     # buffered: a pipe
        def f(b):
            print("from worker", end=" ")     # flushed when it leaves
            return b
        p = g.Pool(f, fake_gpus=2)
        got = []
        p.run(iter([(0, b"x"), None]).__next__, lambda *r: got.append(r))
        assert got == [(0, 0, 0, b"x")]
        pids = [i["pid"] for i in p.info()]
        print(*pids)
        # no close(): the interpreter's exit destroys the pool
        '''
    r = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('before the pool') == 1
    # The worker left cleanly (its fini flushed it): not killed when its
    # master died.
    assert r.stdout.count('from worker') == 1
