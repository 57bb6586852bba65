#!/usr/bin/env bash
# Install dependencies, build with warnings as errors, and run the unit and
# integration tests (multi-rank cases through mpirun on shm and tcp).
# LABELS selects CTest labels (default "unit|integration|stress").
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -L "${LABELS:-unit|integration|stress}" -j"${CTEST_JOBS:-2}"
