"""The launcher's options (hydra.launcher.*), registered with Hydra's
ConfigStore as hydra/launcher=gpupool.

Each field is gpupool.Pool's keyword of the same name; None (every
default here) means Pool's own default, so the two cannot drift apart.
Hydra re-executes this module each time it scans its plugins (in the
workers too): it must stay cheap and import nothing of gpupool.
"""

from dataclasses import dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class GpupoolLauncherConf:
    _target_: str = (
        "hydra_plugins.hydra_gpupool_launcher.gpupool_launcher.GpupoolLauncher")
    # Any: a string ("0,2", "free", "free:0,2") or a list of ids.
    gpus: Any = None
    per_gpu: Optional[int] = None
    processes: Optional[int] = None
    gpus_per_worker: Optional[int] = None
    timeout: Optional[float] = None
    retries: Optional[int] = None
    grace: Optional[float] = None
    # Any: bytes (an int) or a size ("20G").
    gpu_mem: Any = None
    wait_free: Optional[bool] = None
    busy_pct: Optional[int] = None
    busy_util: Optional[int] = None
    start_method: Optional[str] = None
    fake_gpus: Optional[int] = None
    max_tasks_per_worker: Optional[int] = None
    max_msg: Optional[int] = None
    nice: Optional[int] = None
    claims: Optional[str] = None
    claim_timeout: Optional[float] = None


ConfigStore.instance().store(
    group="hydra/launcher", name="gpupool", node=GpupoolLauncherConf,
    provider="gpupool")
