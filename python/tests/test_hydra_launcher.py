"""gpupool's Hydra launcher (hydra/launcher=gpupool, python/hydra_plugins/).

Hydra's own suites for launcher plugins, from the installed hydra-core
(hydra.test_utils.launcher_common_tests): LauncherTestSuite,
BatchedSweeperTestSuite and IntegrationTestSuite, each case as it is, under
its hydra-core name; none is left out or changed. IntegrationTestSuite runs
`python task.py -m ...` in a child, which finds the launcher only by
scanning the installed hydra_plugins: the package must be pip-installed in
this interpreter, not only on the source path. Then what those suites do
not test and a user relies on: a job that crashes or times out fails alone
(a FAILED JobReturn, rc 1 from the command line), retries, one GPU per job,
per_gpu, the numbering across batches, the worker's traceback, and
examples/hydra_sweep with the basic and the Optuna sweeper.

Fake GPUs throughout (hydra.launcher.fake_gpus=2); conftest.py gives the
session its own claims directory, which the children inherit.
"""

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("hydra", reason="hydra-core is not installed "
                    "(pip install 'gpupool[hydra]')")

import gpupool  # noqa: E402
from hydra.core.plugins import Plugins  # noqa: E402
from hydra.core.utils import JobStatus  # noqa: E402
from hydra.plugins.launcher import Launcher  # noqa: E402
from hydra.test_utils.launcher_common_tests import (  # noqa: E402
    BatchedSweeperTestSuite, IntegrationTestSuite, LauncherTestSuite)

try:
    from hydra_plugins.hydra_gpupool_launcher import _core
except ImportError:
    pytest.skip("gpupool's hydra_plugins is not installed in this "
                "interpreter (pip install the package)",
                allow_module_level=True)

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "hydra_sweep"
           / "app.py")
FAKE = "hydra.launcher.fake_gpus=2"


def test_discovery():
    """Hydra finds the launcher by its scan of hydra_plugins, once."""
    names = [x.__name__ for x in Plugins.instance().discover(Launcher)]
    assert names.count("GpupoolLauncher") == 1, names


def test_config_has_every_pool_option():
    """hydra.launcher.* has a field (default None: Pool's) for each of
    Pool's keywords that are the library's option rows, and each field
    is a Pool keyword: config.py makes them from the rows."""
    import dataclasses
    import inspect
    from gpupool import _gpupool
    from hydra_plugins.hydra_gpupool_launcher.config import \
        GpupoolLauncherConf
    fields = {f.name: f.default for f in
              dataclasses.fields(GpupoolLauncherConf)}
    del fields["_target_"]
    rows = {r[1] for r in _gpupool.pool_options() if r[1] is not None}
    assert rows <= set(fields), rows - set(fields)
    assert set(fields) <= set(inspect.signature(gpupool.Pool).parameters)
    assert set(fields.values()) == {None}


def test_namespace_package():
    """hydra_plugins stays a namespace package (no __init__.py), which
    other installed plugins share; an __init__.py would hide theirs."""
    import hydra_plugins
    assert getattr(hydra_plugins, "__file__", None) is None
    assert len(list(hydra_plugins.__path__)) >= 1


def test_import_gpupool_is_light():
    """import gpupool never imports hydra (nor omegaconf, optuna)."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, gpupool; print(sorted(m for m "
         "in sys.modules if m.split('.')[0] in ('hydra', 'omegaconf', "
         "'optuna', 'hydra_plugins')))"],
        capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("launcher_name, overrides", [("gpupool", [FAKE])])
class TestGpupoolLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize(
    "launcher_name, overrides",
    [("gpupool", ["hydra/sweeper=basic", "hydra.sweeper.max_batch_size=2",
                  FAKE])])
class TestGpupoolLauncherBatched(BatchedSweeperTestSuite):
    pass


# The launcher on the command line, not in the defaults list: upstream
# joblib's `{"defaults": [{"hydra/launcher": ...}]}` fails on hydra-core
# 1.3 ("Multiple values for hydra/job_logging ... use 'override'").
@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({}, ["-m", "hydra/launcher=gpupool", "hydra/hydra_logging=hydra_debug",
           "hydra/job_logging=disabled", FAKE])])
class TestGpupoolLauncherIntegration(IntegrationTestSuite):
    pass


# ---- Our own cases, in this process through Hydra's sweep runner ----------

@pytest.fixture
def launches(monkeypatch):
    """The JobReturns of every launch(), batch by batch, even where the
    sweep then raises (the basic sweeper raises a batch's first failure)."""
    got = []
    real = _core.launch

    def record(launcher, job_overrides, initial_job_idx):
        rets = real(launcher, job_overrides, initial_job_idx)
        got.append((initial_job_idx, rets))
        return rets

    # gpupool_launcher.launch() looks _core.launch up at each call.
    monkeypatch.setattr(_core, "launch", record)
    return got


def sweep(runner, tmp_path, task, overrides):
    return runner(calling_file=None, calling_module="hydra.test_utils.a_module",
                  task_function=task, config_path=None, config_name=None,
                  overrides=["hydra/launcher=gpupool", FAKE,
                             "hydra/job_logging=disabled"] + overrides,
                  temp_dir=tmp_path / "sweep")


def test_crash_fails_alone(hydra_sweep_runner, tmp_path, launches):
    def task(cfg):
        if cfg.x == 1:
            os._exit(3)
        return cfg.x * 10

    with pytest.raises(gpupool.WorkerCrashed, match="exited with status 3"):
        with sweep(hydra_sweep_runner, tmp_path, task, ["+x=1,2,3"]):
            pass
    [(first, rets)] = launches
    assert first == 0
    assert [r.status for r in rets] == [JobStatus.FAILED,
                                        JobStatus.COMPLETED,
                                        JobStatus.COMPLETED]
    bad = rets[0]
    assert bad.overrides == ["+x=1"] and bad.cfg == {"x": 1}
    assert bad.hydra_cfg.hydra.job.num == 0
    assert isinstance(bad._return_value, gpupool.WorkerCrashed)
    assert bad._return_value.exitcode == 3
    assert [r.return_value for r in rets[1:]] == [20, 30]


def test_timeout(hydra_sweep_runner, tmp_path, launches):
    def task(cfg):
        if cfg.x == 2:
            time.sleep(3600)
        return cfg.x

    with pytest.raises(gpupool.Timeout):
        with sweep(hydra_sweep_runner, tmp_path, task,
                   ["+x=1,2", "hydra.launcher.timeout=1"]):
            pass
    [(_, rets)] = launches
    assert rets[0].status == JobStatus.COMPLETED and rets[0].return_value == 1
    assert rets[1].status == JobStatus.FAILED
    assert isinstance(rets[1]._return_value, gpupool.Timeout)


def test_retries_rescue_a_crash(hydra_sweep_runner, tmp_path):
    mark = tmp_path / "crashed-once"

    def task(cfg):
        if cfg.x == 1 and not mark.exists():
            mark.touch()
            os._exit(3)
        return cfg.x

    with sweep(hydra_sweep_runner, tmp_path, task,
               ["+x=1,2", "hydra.launcher.retries=1"]) as s:
        assert [r.return_value for r in s.returns[0]] == [1, 2]
    assert mark.exists()


def rendezvous(d, n):
    """A job's part in a rendezvous of n jobs in dir d: it waits until n
    jobs have arrived, then returns its CUDA_VISIBLE_DEVICES, or why it
    failed (returned, so that the test says it)."""
    (d / f"arrived-{os.getpid()}-{time.monotonic_ns()}").touch()
    deadline = time.monotonic() + 120  # reached only when jobs serialise
    while len(list(d.glob("arrived-*"))) < n:
        if time.monotonic() > deadline:
            return "the jobs did not run at once"
        time.sleep(0.02)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize("per_gpu", [1, 2])
def test_one_gpu_per_job(hydra_sweep_runner, tmp_path, per_gpu):
    """2 GPUs x per_gpu jobs run at once, each seeing one GPU of its own
    (its CUDA_VISIBLE_DEVICES), per_gpu of them on each GPU."""
    n = 2 * per_gpu
    xs = ",".join(str(i) for i in range(n))
    with sweep(hydra_sweep_runner, tmp_path,
               lambda cfg: rendezvous(tmp_path, n),
               [f"+x={xs}", f"hydra.launcher.per_gpu={per_gpu}"]) as s:
        got = [r.return_value for r in s.returns[0]]
    assert sorted(got) == sorted(["fake0", "fake1"] * per_gpu), got


def test_numbering_across_batches(hydra_sweep_runner, tmp_path, launches):
    from hydra.core.hydra_config import HydraConfig

    def task(cfg):
        return HydraConfig.get().job.num, os.getcwd()

    with sweep(hydra_sweep_runner, tmp_path, task,
               ["+x=0,1,2,3,4", "hydra/sweeper=basic",
                "hydra.sweeper.max_batch_size=2", "hydra.job.chdir=true"]) as s:
        assert [first for first, _ in launches] == [0, 2, 4]
        flat = [r for batch in s.returns for r in batch]
        assert [r.hydra_cfg.hydra.job.num for r in flat] == [0, 1, 2, 3, 4]
        assert [r.hydra_cfg.hydra.job.id for r in flat] == [
            f"a_module_{i}" for i in range(5)]
        # The job saw its own number, and ran in its own dir.
        assert [r.return_value[0] for r in flat] == [0, 1, 2, 3, 4]
        for i, r in enumerate(flat):
            assert Path(r.return_value[1]) == Path(s.temp_dir) / str(i)
            assert (Path(s.temp_dir) / str(i) / ".hydra"
                    / "overrides.yaml").exists()


def test_worker_traceback_reaches_the_user(hydra_sweep_runner, tmp_path):
    def deep_in_the_task(x):
        raise ValueError(f"bad x={x}")

    def task(cfg):
        deep_in_the_task(cfg.x)

    with pytest.raises(ValueError, match="bad x=1") as ei:
        with sweep(hydra_sweep_runner, tmp_path, task, ["+x=1"]):
            pass
    [note] = ei.value.__notes__
    assert "Traceback in the gpupool worker" in note
    assert "CUDA_VISIBLE_DEVICES=fake" in note
    assert "deep_in_the_task" in note


def test_bad_option_is_named(hydra_sweep_runner, tmp_path):
    with pytest.raises(ValueError, match="per_gpu=0"):
        with sweep(hydra_sweep_runner, tmp_path, lambda cfg: 0,
                   ["+x=1", "hydra.launcher.per_gpu=0"]):
            pass


# ---- From the command line: examples/hydra_sweep ---------------------------

def run_example(tmp_path, *args):
    env = dict(os.environ)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "-m", "hydra/launcher=gpupool", FAKE,
         f"hydra.sweep.dir={tmp_path}/sweep", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def job_logs(tmp_path):
    return sorted((tmp_path / "sweep").glob("*/app.log"))


# spawn: workers that start clean, as a parent that has initialised CUDA
# gets; the app's task function (of __main__) then travels by value.
@pytest.mark.parametrize("start", [[], ["hydra.launcher.start_method=spawn"]],
                         ids=["default", "spawn"])
def test_example_basic_sweep(tmp_path, start):
    p = run_example(tmp_path, "x=1,2,3", *start)
    assert p.returncode == 0, p.stderr
    logs = job_logs(tmp_path)
    assert [f.parent.name for f in logs] == ["0", "1", "2"]
    for i, f in enumerate(logs):
        text = f.read_text()
        assert f"job {i}: x={i + 1} on CUDA_VISIBLE_DEVICES=fake" in text


def test_example_crash_exits_1(tmp_path):
    p = run_example(tmp_path, "x=1,2", "mode=ok,crash")
    assert p.returncode == 1
    assert "Error executing job with overrides: ['x=1', 'mode=crash']" \
        in p.stderr
    assert "WorkerCrashed: the worker running this item exited with " \
        "status 3" in p.stderr
    # The other jobs ran, and have their dirs.
    assert len(job_logs(tmp_path)) == 4


def test_example_raise_shows_the_worker_line(tmp_path):
    """The app's task function goes to the worker by value (cloudpickle
    names its code "<dynamic-code>"): the note names app.py and shows the
    line that raised."""
    p = run_example(tmp_path, "x=1", "mode=raise")
    assert p.returncode == 1
    assert "ValueError: x=1 is not allowed" in p.stderr
    assert f'File "{EXAMPLE}", line' in p.stderr, p.stderr
    assert 'raise ValueError(f"x={cfg.x} is not allowed")' in p.stderr
    assert "<dynamic-code>" not in p.stderr


def test_example_optuna_sweep(tmp_path):
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        pytest.skip("hydra-optuna-sweeper is not installed "
                    "(pip install hydra-optuna-sweeper)")
    p = run_example(tmp_path, "hydra/sweeper=optuna",
                    "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2",
                    "hydra.sweeper.max_failure_rate=1.0",
                    # Seeded: unseeded, the sampler can pick crash for
                    # all 6 trials, and Optuna then has no best.
                    "hydra.sweeper.sampler.seed=0",
                    "x=range(-3,4)", "mode=choice(ok,crash)")
    assert p.returncode == 0, p.stderr
    assert "Best parameters" in p.stdout + p.stderr
    # Seed 0 draws both: a crashed trial failed alone, the sweep went on.
    assert "Error executing job with overrides" in p.stderr
    # Three batches of two, numbered 0..5 across them.
    assert sorted(int(d.name) for d in (tmp_path / "sweep").iterdir()
                  if d.is_dir()) == [0, 1, 2, 3, 4, 5]
    assert (tmp_path / "sweep" / "optimization_results.yaml").exists()
