#!/usr/bin/env bash
# Install dependencies, build, and run the Fig. 6 demo: rank 0 sends
# XtqPuts that run tasks on the CPU agents of the other ranks over real
# libfabric (shm on one host). NP ranks (default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
./scripts/deps.sh
./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== xtq_info (summary) =="
./build/tools/xtq_info --brief || true
echo "== mpirun -np $NP build/examples/fig6 =="
mpirun --oversubscribe --bind-to none -np "$NP" ./build/examples/fig6
