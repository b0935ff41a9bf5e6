"""The whole pytest session gets a claims directory of its own
(GPUPOOL_CLAIMS): its pools (every one claims its GPUs, fake ones
included, host-wide) never meet the machine's default directory, nor
another test run beside this one, nor a gpupool the user runs. Set at
import, before any test module makes a pool; removed at the end.
test_claims.py gives each case a directory of its own besides."""

import os
import shutil
import tempfile

_DIR = tempfile.mkdtemp(prefix="gpupool-test-claims-")
# Usable by every user, as the default is (sticky, world-writable): a
# test drops to another uid (test_api's niceness case).
os.chmod(_DIR, 0o1777)
os.environ["GPUPOOL_CLAIMS"] = _DIR
# Not inside someone else's claim: claim() would return that one's GPUs.
for _name in ("GPUPOOL_CLAIMED", "GPUPOOL_TASK"):
    os.environ.pop(_name, None)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_DIR, ignore_errors=True)


def pytest_configure(config):
    # The marks of joblib's own tests, which test_joblib.py runs: joblib
    # registers them in a conftest.py its wheel does not ship.
    for mark in ("thread_unsafe", "no_cover"):
        config.addinivalue_line("markers", "%s: joblib's test mark" % mark)
