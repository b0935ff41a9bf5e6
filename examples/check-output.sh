#!/bin/sh
# check-output.sh: run an example for `meson test`, show what it printed,
# and pass only if it exits 0 and prints each expected text.
#
#	usage: check-output.sh [-e text]... [-s text] -- command [arg...]
#
#	-e text	some line of the output (stdout and stderr) must contain text
#	-s text	if some line contains text, skip the test (exit 77, which
#		meson reports as SKIP): e.g. a GPU-only check on a machine
#		without one
set -u

expect=''
skip=''
nl='
'
while [ $# -gt 0 ]; do
	case "$1" in
	-e)	expect="$expect$2$nl"; shift 2 ;;
	-s)	skip="$2"; shift 2 ;;
	--)	shift; break ;;
	*)	echo "usage: check-output.sh [-e text]... [-s text] -- command" >&2
		exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "check-output.sh: no command" >&2; exit 2; }

out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
	echo "check-output.sh: '$*' exited with status $rc" >&2
	exit 1
fi
if [ -n "$skip" ] && printf '%s\n' "$out" | grep -qF -- "$skip"; then
	echo "check-output.sh: skipped: output says '$skip'" >&2
	exit 77
fi
status=0
oldifs=$IFS
IFS=$nl
for e in $expect; do
	if ! printf '%s\n' "$out" | grep -qF -- "$e"; then
		echo "check-output.sh: no line contains '$e'" >&2
		status=1
	fi
done
IFS=$oldifs
exit $status
