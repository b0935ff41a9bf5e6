#!/bin/sh
# tsp-run.sh: drive Debian's task-spooler the way its users do, for the
# benchmark harness: one `tsp` call per job, then wait for all of them.
#
#	TS_SOCKET=DIR/sock TMPDIR=DIR TS_SLOTS=4 sh tsp-run.sh FILE
#
# Each line of FILE is run as `sh -c LINE` (tsp itself execs its argv, no
# shell). Debian's task-spooler is upstream 1.0, with no GPU slots: it sets
# no CUDA_VISIBLE_DEVICES. The caller gives it a private socket and TMPDIR
# (its per-job output files go there) and reaps the server it leaves
# behind after `tsp -K`.
set -e
tsp -S "${TS_SLOTS:-4}" >/dev/null
while IFS= read -r line; do
	[ -n "$line" ] || continue
	tsp sh -c "$line" >/dev/null
done < "$1"
# `tsp -w` waits for the last job added; others may still run (they end in
# any order), so wait for whatever the list still shows running or queued.
tsp -w >/dev/null 2>&1 || true
while :; do
	left=$(tsp -l | awk 'NR > 1 && ($2 == "running" || $2 == "queued") { print $1 }')
	[ -n "$left" ] || break
	for id in $left; do
		tsp -w "$id" >/dev/null 2>&1 || true
	done
done
fails=$(tsp -l | awk 'NR > 1 && $2 == "finished" && $4 != "0" { n++ } END { print n + 0 }')
tsp -K >/dev/null 2>&1 || true
[ "$fails" -eq 0 ]
