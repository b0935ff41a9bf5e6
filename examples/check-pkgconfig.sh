#!/bin/sh
# gpupool.pc as installed and as uninstalled: pkg-config --static --libs
# names libraries only with -L and -l (an absolute path to a .a is
# wrong on any other layout), and a static link of squares.c with what
# they say builds and runs.
# usage: check-pkgconfig.sh BUILDDIR SQUARES_C PKG_CONFIG CC [CC_ARGS...]
set -eu
build=$1 src=$2 pkgconf=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for pc in "$build/meson-private" "$build/meson-uninstalled"; do
	name=gpupool
	[ -e "$pc/$name.pc" ] || name=gpupool-uninstalled
	libs=$(PKG_CONFIG_PATH=$pc "$pkgconf" --static --libs "$name")
	echo "$name: $libs"
	for w in $libs; do
		case $w in
		-*) ;;
		*)	echo "$pc/$name.pc: '$w' is a library named by its" \
			    "path: use -L and -l" >&2
			exit 1 ;;
		esac
	done
done

# The uninstalled one: libgpupool.a (not the .so beside it) and its
# Libs.private; hwloc shared (its own static dependencies, libudev's
# among them, need not be installed).
pc=$build/meson-uninstalled
libs=
for w in $(PKG_CONFIG_PATH=$pc "$pkgconf" --libs gpupool-uninstalled) \
    $(sed -n 's/^Libs\.private: //p' "$pc/gpupool-uninstalled.pc") \
    $("$pkgconf" --libs hwloc); do
	[ "$w" = -lgpupool ] && w=-l:libgpupool.a
	libs="$libs $w"
done
# shellcheck disable=SC2046,SC2086
"$@" $(PKG_CONFIG_PATH=$pc "$pkgconf" --cflags gpupool-uninstalled) \
    -o "$tmp/squares" "$src" $libs
GPUPOOL_FAKE_GPUS=2 GPUPOOL_TOPOLOGY= "$tmp/squares" > "$tmp/out"
grep -q '^7 squared is 49 ' "$tmp/out" || {
	cat "$tmp/out" >&2
	exit 1
}
echo "static link of squares.c with gpupool-uninstalled.pc: ok"
