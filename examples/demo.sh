#!/bin/sh
# The quick start: install what is missing and build (.ci/setup), then run
# a 16-task hyper-parameter sweep with gpupool-run on this machine's GPUs,
# or on 4 fake GPUs where it has none, then the pool_map example.
set -eu
cd "$(dirname "$0")/.."
.ci/setup
run=build/src/cli/gpupool-run
gpus=
if ! $run --show-gpus >/dev/null 2>&1; then
	echo "demo: no GPU found here: running on 4 fake GPUs" >&2
	gpus="--fake-gpus 4"
fi
log=$(mktemp /tmp/gpupool-demo.XXXXXX)
echo "demo: gpupool-run $gpus --joblog $log examples/sweep.txt" >&2
$run $gpus --joblog "$log" examples/sweep.txt
echo "demo: joblog $log:" >&2
head -4 "$log" >&2
echo "demo: the library: pool_map() over 12 items" >&2
GPUPOOL_FAKE_GPUS=${gpus:+4} build/examples/cpu_map
