"""The program of a worker that starts clean (start_method="spawn").

Run as  python -c "...; from gpupool import _spawn; _spawn.main()"  by
the library's exec'd worker (gp_pool_opts.exec; gpupool._start.argv()).
main() hands the process to the library (_gpupool.worker_main(), which
never returns): it checks the pool's protocol and version, maps the
worker's shared memory, and calls init() below, through the C init, with
the bytes gpupool._start.payload() made, before the first item:

1. multiprocessing's preparation, as its spawn start method does: the
   caller's sys.path and working directory, then its __main__ run again
   under the name __mp_main__ (what the script does under
   if __name__ == "__main__" is not run again), with
   current_process()._inheriting set, so that a Pool created at the top
   level of the script fails clearly instead of starting workers of its
   own.
2. the Initializer (gpupool._task), unpickled once the caller's modules
   can be found, and run: the pid report, then initializer(*initargs).
   A function of __main__ sent by value sees this worker's __main__ (the
   script run again, and what the initializer sets there, which from
   then on is the worker's, as a fork's globals are).
"""

import pickle


def main():
    from . import _gpupool
    _gpupool.worker_main()


def init(payload):
    prep, init_bytes = pickle.loads(payload)
    from multiprocessing import process, spawn
    me = process.current_process()
    me._inheriting = True
    try:
        spawn.prepare(prep)
    finally:
        me._inheriting = False
    from . import _task
    _task.clean = True
    _task.load_init(init_bytes)()
    # What __main__ holds now (the script's names, what the initializer
    # set, the caller's values it was sent with) is the worker's own:
    # functions sent later see it, never the caller's copies again.
    _task._injected.clear()
