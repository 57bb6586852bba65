#!/usr/bin/env bash
# mpirun across hosts in network namespaces (lib.sh): sets them up, runs
# `mpirun ARGS...` on the first (ranks round robin over all), removes them.
# Usage: mpirun.sh [--hosts N] [--timeout S] [--] MPIRUN-ARGS...
# For scripts that take an mpirun command line (e.g. peer_death.sh).
set -u
. "$(dirname "$0")/lib.sh"
hosts=2
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --timeout) MH_TIMEOUT=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
mh_require
mh_setup "$hosts" || { mh_log "namespace setup failed"; exit 1; }
mh_mpirun "$@"
