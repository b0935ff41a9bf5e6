"""A Hydra app whose sweep runs on gpupool's launcher: one job per GPU.

    python app.py -m hydra/launcher=gpupool x=1,2,3

Each job logs which GPU it was given (CUDA_VISIBLE_DEVICES, set by gpupool
in the worker before the job runs) and returns a loss, so the same app
serves hydra-optuna-sweeper (README.md). mode=raise|crash|hang makes a job
fail in each way a launcher sees one fail.
"""

import logging
import os
import time

import hydra
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    # A real job would do its CUDA work here: the framework sees only this
    # job's GPU, as device 0.
    log.info("job %d: x=%s on CUDA_VISIBLE_DEVICES=%s (pid %d)",
             hydra.core.hydra_config.HydraConfig.get().job.num, cfg.x,
             os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid())
    time.sleep(cfg.sleep)
    if cfg.mode == "raise":
        raise ValueError(f"x={cfg.x} is not allowed")
    if cfg.mode == "crash":
        os._exit(3)  # as a segfault or the OOM killer would end it
    if cfg.mode == "hang":
        time.sleep(3600)
    return float(cfg.x - 1) ** 2  # the loss an Optuna sweep minimizes


if __name__ == "__main__":
    main()
