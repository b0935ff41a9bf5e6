"""gpupool's launcher for Hydra: `python app.py -m hydra/launcher=gpupool`
runs each job of a sweep in a gpupool worker, one GPU per job at a time.

Hydra finds it by scanning the namespace package hydra_plugins (which has
no __init__.py, on purpose). This file stays empty of imports: re-exporting
the launcher class here would make Hydra's discovery list it twice, and
Hydra imports this package without gpupool or hydra being needed yet.
The launcher: gpupool_launcher.py; its options: config.py; the work, run
only from launch(): _core.py (docs/python.md, "Hydra").
"""
