"""examples/joblib_gridsearch.py and examples/optuna_gpus.py, run as a
user runs them (on 4 fake GPUs): each fit and each trial ran in a worker
of its own GPU, and every GPU had a share. Skipped where scikit-learn,
joblib or optuna is not installed."""

import os
import re
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        os.pardir, os.pardir, "examples")


def run(name, *args):
    env = dict(os.environ, GPUPOOL_FAKE_GPUS="4")
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)] +
                       list(args), env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_gridsearch_fits_on_every_gpu():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("joblib", reason="joblib is not installed")
    out = run("joblib_gridsearch.py")
    assert "12 settings x 5 folds = 60 fits" in out, out
    per = dict(re.findall(r"GPU (\d): (\d+)", out))
    assert sorted(per) == ["0", "1", "2", "3"], out
    assert sum(map(int, per.values())) == 60, out
    assert "best {'C': 1, 'gamma': 0.1} accuracy 0.980" in out, out


def test_optuna_study_runs_on_every_gpu():
    pytest.importorskip("optuna", reason="optuna is not installed")
    out = run("optuna_gpus.py", "5")
    assert "20 trials on 4 GPUs: fake0: 5, fake1: 5, fake2: 5, fake3: 5" \
        in out, out
    assert re.search(r"best \{'x': -?[\d.]+, 'y': -?\d+\} value [\d.]+",
                     out), out
