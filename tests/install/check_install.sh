#!/usr/bin/env bash
# Install libxtq from BUILD_DIR into a scratch prefix, then build and run a
# consumer with find_package(xtq) and another with pkg-config xtq.
set -euo pipefail
SRC=$1 BUILD=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -f "$WORK/prefix/include/xtq/xtq.h"
libdir=$(ls -d "$WORK"/prefix/lib*/pkgconfig | head -1 | xargs dirname)
cmake -S "$SRC/tests/install/consumer" -B "$WORK/cmake" -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/cmake" >/dev/null
LD_LIBRARY_PATH="$libdir" "$WORK/cmake/consumer"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -o "$WORK/pc_consumer" "$SRC/tests/install/consumer/consumer.c" $(pkg-config --cflags --libs xtq)
LD_LIBRARY_PATH="$libdir" "$WORK/pc_consumer"
echo "install: find_package(xtq) and pkg-config xtq consumers built and ran"
