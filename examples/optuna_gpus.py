"""Optuna on several GPUs, the way Optuna's FAQ says: one process per GPU,
each running study.optimize() on one study in shared storage. gpupool's
pinned workers are those processes (fake GPUs where there are none).
Run: python3 examples/optuna_gpus.py [TRIALS_PER_GPU]   (needs optuna)

The storage is Optuna's journal file (one host; an RDB URL such as
"sqlite:///study.db" or PostgreSQL works the same). Each trial records the
GPU its worker owns, so the end says how many trials each GPU ran.
"""
import collections
import os
import sys
import tempfile

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

import gpupool

NAME = "gpupool-demo"


def objective(trial):
    # A real objective trains here on "cuda": its worker's GPU, device 0.
    x = trial.suggest_float("x", -10, 10)
    y = trial.suggest_int("y", -5, 5)
    trial.set_user_attr("gpu", os.environ["CUDA_VISIBLE_DEVICES"])
    return (x - 2) ** 2 + (y + 1) ** 2


def optimize(path, n_trials):
    """In a worker: this GPU's share of the study."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=NAME, storage=JournalStorage(
        JournalFileBackend(path)))
    study.optimize(objective, n_trials=n_trials)
    return os.environ["CUDA_VISIBLE_DEVICES"]


if __name__ == "__main__":
    per_gpu = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tmp = tempfile.TemporaryDirectory()
    path = os.path.join(tmp.name, "study.journal")
    storage = JournalStorage(JournalFileBackend(path))
    optuna.create_study(study_name=NAME, storage=storage)
    try:
        pool = gpupool.Pool()           # one worker per GPU
    except OSError as e:                # no GPU (or no driver) here
        print("gpupool: %s; using 4 fake GPUs" % e, file=sys.stderr)
        pool = gpupool.Pool(fake_gpus=4)
    with pool:
        pool.starmap(optimize, [(path, per_gpu)] * pool.size())
    study = optuna.load_study(study_name=NAME, storage=storage)
    runs = collections.Counter(t.user_attrs["gpu"] for t in study.trials)
    print("%d trials on %d GPUs:" % (len(study.trials), len(runs)),
          ", ".join("%s: %d" % kv for kv in sorted(runs.items())))
    print("best", {k: round(v, 3) if isinstance(v, float) else v
                   for k, v in study.best_params.items()},
          "value %.4f" % study.best_value)
