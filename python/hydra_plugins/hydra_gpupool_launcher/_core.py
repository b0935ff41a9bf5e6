"""What GpupoolLauncher.launch() does: one gpupool.Pool per launch (a
sweep's batch), one pool.submit() per job, the JobReturns in the order of
the jobs.

In the worker each job runs as under Hydra's other launchers: Hydra's
singleton state is set (once per worker per launch), the job's sweep
config is loaded, and hydra.core.utils.run_job runs the task in the job's
own dir with its own log. A task that raises comes back from run_job as a
FAILED JobReturn; a worker that dies or runs past the timeout returns
nothing, so the launcher builds that FAILED JobReturn itself, holding
gpupool.WorkerCrashed or gpupool.Timeout: Hydra reports both as it reports
any failed job.

Not scanned by Hydra (the leading underscore), so imported once per
process: the state kept across jobs in a worker lives here.
"""

import inspect
import logging
import os
import pickle
import sys
import traceback
import types
from pathlib import Path
from typing import List, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import (JobReturn, JobStatus, configure_log,
                              filter_overrides, run_job, setup_globals)
from omegaconf import open_dict

try:
    import cloudpickle
except ImportError:  # gpupool installed with --no-deps
    cloudpickle = None

log = logging.getLogger(__name__)

# In a worker: (token, (hydra_context, config, task_function, files)) of
# the launch whose singleton state this worker has set.
_applied = (None, None)


def _sweep_config(hydra_context, config, overrides, idx):
    sweep_config = hydra_context.config_loader.load_sweep_config(
        config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    return sweep_config


def _job(idx, overrides, blob, token):
    """In the worker: run job idx; its JobReturn, cloudpickled."""
    global _applied
    if _applied[0] != token:
        hydra_context, config, task_function, state, files = \
            pickle.loads(blob)
        setup_globals()
        # set_state rebuilds Hydra's Plugins, which re-executes every
        # public module under hydra_plugins (about 16 ms): once per
        # worker per launch, not per job.
        Singleton.set_state(state)
        _applied = (token, (hydra_context, config, task_function, files))
    hydra_context, config, task_function, files = _applied[1]
    sweep_config = _sweep_config(hydra_context, config, overrides, idx)
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(hydra_context=hydra_context, config=sweep_config,
                  task_function=task_function,
                  job_dir_key="hydra.sweep.dir",
                  job_subdir_key="hydra.sweep.subdir")
    exc = ret._return_value if ret.status == JobStatus.FAILED else None
    if isinstance(exc, BaseException) and exc.__traceback__ is not None:
        # The traceback does not pickle; its text does, as a note, which
        # Hydra prints under the error: where in the task it failed.
        exc.add_note("".join(
            ["\nTraceback in the gpupool worker (pid %d, "
             "CUDA_VISIBLE_DEVICES=%s):\n" % (
                 os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"))]
            + list(_traceback(exc, files).format())).rstrip())
    # Cloudpickled: ret.hydra_cfg's hydra.launcher node is typed by
    # config.GpupoolLauncherConf, which set_state just re-created here, so
    # plain pickle refuses it ("not the same object as ..."); cloudpickle
    # sends that class by value.
    return cloudpickle.dumps(ret)


def _main_files(task_function):
    """(name, first line) -> file of the code of __main__'s functions (the
    app's task function among them, and what they define inside): the
    code cloudpickle sends by value, which it names "<dynamic-code>"."""
    files = {}
    todo = [task_function] + list(vars(sys.modules["__main__"]).values())
    for f in todo:
        try:
            code = inspect.unwrap(f).__code__
        except Exception:  # not a function (or a wrapper loop)
            continue
        stack = [code]
        while stack:
            c = stack.pop()
            if not c.co_filename.startswith("<"):
                files[(c.co_name, c.co_firstlineno)] = c.co_filename
            stack.extend(k for k in c.co_consts
                         if isinstance(k, types.CodeType))
    return files


def _traceback(exc, files):
    """exc's traceback, its frames in code sent by value named by their
    file again (files: _main_files()), so that the lines show."""
    te = traceback.TracebackException.from_exception(exc)
    todo, seen = [(te, exc)], set()
    while todo:
        te_, e = todo.pop()
        if te_ is None or e is None or id(e) in seen:
            continue
        seen.add(id(e))
        frames = [fr for fr, _ in traceback.walk_tb(e.__traceback__)]
        for i, (fs, fr) in enumerate(zip(te_.stack, frames)):
            key = (fr.f_code.co_name, fr.f_code.co_firstlineno)
            if fs.filename == "<dynamic-code>" and key in files:
                te_.stack[i] = traceback.FrameSummary(
                    files[key], fs.lineno, fs.name,
                    end_lineno=fs.end_lineno, colno=fs.colno,
                    end_colno=fs.end_colno)
        todo += [(te_.__cause__, e.__cause__),
                 (te_.__context__, e.__context__)]
    return te


def _failed(launcher, idx, overrides, exc) -> JobReturn:
    """The FAILED JobReturn of a job whose worker died or timed out (or
    whose result did not come back): run_job never returned one."""
    cfg = _sweep_config(launcher.hydra_context, launcher.config, overrides,
                        idx)
    ret = JobReturn(overrides=list(overrides), hydra_cfg=cfg,
                    task_name=cfg.hydra.job.name, status=JobStatus.FAILED)
    task_cfg = cfg.copy()
    with open_dict(task_cfg):
        del task_cfg["hydra"]
    ret.cfg = task_cfg
    ret.return_value = exc
    return ret


def launch(launcher, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> Sequence[JobReturn]:
    import gpupool  # here, not at the top: Hydra imports the plugin early

    if not job_overrides:
        return []

    if cloudpickle is None:
        raise ImportError("the gpupool Hydra launcher needs cloudpickle "
                          "(pip install cloudpickle), gpupool's dependency")
    config = launcher.config
    assert config is not None and launcher.hydra_context is not None, \
        "setup() was not called"
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    kw = ", ".join("%s=%r" % kv for kv in launcher.pool_kwargs.items())
    log.info(f"gpupool.Pool({kw}) is launching {len(job_overrides)} jobs")
    log.info(f"Launching jobs, sweep output dir : {sweep_dir}")
    for i, overrides in enumerate(job_overrides):
        log.info("\t#{} : {}".format(initial_job_idx + i,
                                     " ".join(filter_overrides(overrides))))

    # Pickled once for the whole launch (closures and __main__'s task
    # function by value), applied once per worker: the token says which
    # launch a worker's state belongs to.
    blob = cloudpickle.dumps((launcher.hydra_context, config,
                              launcher.task_function, Singleton.get_state(),
                              _main_files(launcher.task_function)))
    token = os.urandom(8).hex()
    runs: List[JobReturn] = []
    with gpupool.Pool(**launcher.pool_kwargs) as pool:
        futs = [pool.submit(_job, initial_job_idx + i, list(ov), blob, token)
                for i, ov in enumerate(job_overrides)]
        for i, (ov, f) in enumerate(zip(job_overrides, futs)):
            try:
                ret = pickle.loads(f.result())
            except Exception as e:  # WorkerCrashed, Timeout, RankLost...
                # Its traceback is this loop's, of no use to the user.
                ret = _failed(launcher, initial_job_idx + i, ov,
                              e.with_traceback(None))
            runs.append(ret)
    return runs
