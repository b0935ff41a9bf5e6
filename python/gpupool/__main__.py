"""python -m gpupool SCRIPT [ARGS...]: run SCRIPT, over every rank of an
MPI job when an MPI launcher started it.

    mpirun -np 4 --map-by ppr:1:node python -m gpupool sweep.py
    srun --ntasks-per-node=1 --mpi=pmix python -m gpupool sweep.py

Rank 0 runs SCRIPT as __main__ (sys.argv is [SCRIPT, ARGS...]), and a
gpupool.Pool() made there spans every rank: each rank forks its own
pinned workers on its own GPUs, with the same keyword arguments, and runs
the items rank 0 hands it. The other ranks import SCRIPT as __mp_main__
(what it does under `if __name__ == "__main__":` does not run there) and
serve until the script ends. The job's exit status is the script's.
Without a launcher, or with one rank, SCRIPT just runs here.

Exit status: the script's; 1 when it raised; 130 on KeyboardInterrupt;
64 for a bad command line; 255 when MPI could not start.
"""

import os
import runpy
import sys
import traceback

from . import _link

USAGE = """usage: python -m gpupool SCRIPT [ARGS...]

Runs SCRIPT (a Python file) as __main__. Under an MPI launcher (mpirun,
srun --mpi=pmix) with several ranks, SCRIPT runs on rank 0 only and every
gpupool.Pool() it makes spans the GPUs of every rank; the other ranks
serve it. See docs/cluster.md, "From Python".
"""


def _status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    print(code, file=sys.stderr)
    return 1


def run_script(argv):
    """SCRIPT as __main__ with sys.argv = argv; its exit status."""
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    try:
        # __file__ absolute, as python SCRIPT makes it: the script is
        # found again after an os.chdir() (clean workers run it again)
        runpy.run_path(os.path.abspath(argv[0]), run_name="__main__")
        return 0
    except SystemExit as e:
        return _status(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        # Its pools end here, while the other ranks still listen (as at
        # interpreter exit, which comes later).
        from . import _exit
        _exit.python_exit()


def _import_main(path):
    """SCRIPT as __mp_main__ and __main__, as a clean worker runs it
    (gpupool._spawn.run_main): a Pool made at its top level fails
    clearly."""
    from multiprocessing import process
    from . import _spawn
    sys.argv = [path]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    me = process.current_process()
    me._inheriting = True
    try:
        _spawn.run_main("init_main_from_path", os.path.abspath(path))
    finally:
        me._inheriting = False


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE) if argv else sys.stderr.write(USAGE)
        return 0 if argv else 64
    if argv[0].startswith("-"):
        sys.stderr.write("python -m gpupool: unknown option %s\n%s"
                         % (argv[0], USAGE))
        return 64
    wired, procs, var = _link.launcher()
    if not wired:
        if procs > 1:
            print("python -m gpupool: started as one of %d processes (%s) "
                  "without MPI wire-up: each would run the whole script "
                  "(under Slurm: srun --mpi=pmix)" % (procs, var),
                  file=sys.stderr)
            return 255
        return run_script(argv)
    link = _link.Link()
    try:
        link.start()
    except OSError as e:
        print("python -m gpupool: %s" % (e,), file=sys.stderr)
        return 255
    from . import _serve
    _serve.rank_env(link)
    if link.size == 1:
        link.end(True, 0)
        return run_script(argv)
    if link.rank == 0:
        from . import _ranks
        _ranks.world = _ranks.World(link)
        rc = run_script(argv)
        _ranks.world.finish(rc)
        return rc
    rc, broken, server = 1, None, None
    try:
        try:
            _import_main(argv[0])
        except (Exception, SystemExit) as e:
            # Served all the same: each Pool then says why, on rank 0.
            traceback.print_exc()
            broken = "".join(traceback.format_exception_only(type(e), e))
        server = _serve.Server(link, broken)
        rc = server.serve()
    except KeyboardInterrupt:
        rc = 130
    except BaseException:
        traceback.print_exc()
    link.end(rc == 0 and server is not None and server.finalize, rc)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
