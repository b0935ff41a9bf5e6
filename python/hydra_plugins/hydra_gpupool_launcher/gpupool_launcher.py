"""GpupoolLauncher: the Launcher Hydra instantiates for hydra/launcher=gpupool.

Kept thin: Hydra re-executes this module on every plugin scan (once per
worker per launch too), so the work lives in _core.py, which the scan
skips, imported when launch() is called.
"""

from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, ListConfig, OmegaConf

# Registers hydra/launcher=gpupool (Hydra's scan imports config.py too;
# this covers an import of this module alone).
from . import config as _conf  # noqa: F401


class GpupoolLauncher(Launcher):
    def __init__(self, **kwargs: Any) -> None:
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None
        # None is Pool's default: left out, so Pool decides.
        self.pool_kwargs = {}
        for k, v in kwargs.items():
            if isinstance(v, ListConfig):  # gpus=[0,2] from a YAML file
                v = OmegaConf.to_container(v)
            if v is not None:
                self.pool_kwargs[k] = v

    def setup(self, *, hydra_context: HydraContext,
              task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from . import _core
        return _core.launch(self, job_overrides, initial_job_idx)
