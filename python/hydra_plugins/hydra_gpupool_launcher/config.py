"""The launcher's options (hydra.launcher.*), registered with Hydra's
ConfigStore as hydra/launcher=gpupool.

Each field is gpupool.Pool's keyword of the same name; None (every
default here) means Pool's own default, so the two cannot drift apart.
The pool options among them are the library's rows (src/opts.def), read
here through the extension alone, so a new row is a field with no edit
here. Hydra re-executes this module each time it scans its plugins (in
the workers too): it must stay cheap, and imports of gpupool nothing but
the extension (no caller's side, no joblib, no hydra of ours).
"""

from dataclasses import field, make_dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from gpupool import _gpupool

# A row's kind as OmegaConf types it: Any where Pool takes either an int
# or text (GPU ids, a size).
_TYPES = {"gpus": Any, "size": Any, "flag": Optional[bool],
          "count": Optional[int], "int": Optional[int],
          "path": Optional[str], "secs": Optional[float]}

# Pool's own keywords, not rows of the library's.
_OWN = [("per_gpu", Optional[int]), ("processes", Optional[int]),
        ("timeout", Optional[float]), ("retries", Optional[int]),
        ("grace", Optional[float]), ("start_method", Optional[str]),
        ("fake_gpus", Optional[int]),
        ("max_tasks_per_worker", Optional[int]),
        ("max_msg", Optional[int])]

GpupoolLauncherConf = make_dataclass("GpupoolLauncherConf", [
    ("_target_", str, field(default=(
        "hydra_plugins.hydra_gpupool_launcher.gpupool_launcher."
        "GpupoolLauncher")))] + [
    (name, t, field(default=None)) for name, t in _OWN + [
        (r[1], _TYPES[r[2]]) for r in _gpupool.pool_options()
        if r[1] is not None]])
GpupoolLauncherConf.__module__ = __name__

ConfigStore.instance().store(
    group="hydra/launcher", name="gpupool", node=GpupoolLauncherConf,
    provider="gpupool")
