"""scikit-learn's GridSearchCV(n_jobs=4) on gpupool's pinned workers: each
fit runs in a worker that owns a GPU (fake GPUs where there are none).
Run: python3 examples/joblib_gridsearch.py   (needs scikit-learn, joblib)

The gpupool lines are the import, which registers the joblib backend
"gpupool", and parallel_config(backend="gpupool"). A model that trains
on a GPU (cuML, XGBoost's device="cuda", torch through skorch) finds its
worker's GPU as device 0: CUDA_VISIBLE_DEVICES names it alone. To show
where each fit ran, a second "score" of the search is its worker's GPU.
"""
import collections
import sys

import joblib
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import gpupool
import gpupool.joblib  # noqa: F401 (registers the backend "gpupool")


def gpu_of_this_fit(estimator, X, y):
    """A scorer that returns the GPU (index in the pool) it ran on."""
    return float(gpupool.current().gpu)


if __name__ == "__main__":
    try:
        gpupool.Pool(1).terminate()     # is there a GPU?
        fake = {}
    except OSError as e:
        print("gpupool: %s; using 4 fake GPUs" % e, file=sys.stderr)
        fake = {"fake_gpus": 4}
    X, y = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1, 10, 100], "gamma": ["scale", 0.01, 0.1]}
    search = GridSearchCV(SVC(), grid, cv=5, n_jobs=4, refit="accuracy",
                          scoring={"accuracy": "accuracy",
                                   "gpu": gpu_of_this_fit})
    with joblib.parallel_config(backend="gpupool", **fake):
        search.fit(X, y)
    res = search.cv_results_
    gpus = collections.Counter(
        int(g) for k in range(5) for g in res["split%d_test_gpu" % k])
    print("%d settings x 5 folds = %d fits" % (len(res["params"]),
                                                sum(gpus.values())))
    print("fits per GPU:", ", ".join("GPU %d: %d" % kv
                                     for kv in sorted(gpus.items())))
    print("best", search.best_params_,
          "accuracy %.3f" % search.best_score_)
