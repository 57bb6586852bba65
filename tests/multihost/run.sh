#!/usr/bin/env bash
# Run one job across hosts in network namespaces (lib.sh) and check that
# every rank chose tcp on its own namespace's interface by itself.
# Usage: run.sh [--hosts N] [--np NP] [--timeout S] [--no-tcp-check]
#               [--mpirun-opt OPT]... -- CMD ARGS
# Exit: the job's status (77: skipped, with the reason).
set -u
. "$(dirname "$0")/lib.sh"
hosts=2 np=4 check=1 mopts=()
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --timeout) MH_TIMEOUT=$2; shift 2 ;;
    --no-tcp-check) check=0; shift ;;
    --mpirun-opt) mopts+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: run.sh [options] -- CMD ARGS" >&2; exit 2; }
mh_require
MH_TMP=$(mktemp -d)
mh_setup "$hosts" || { mh_log "namespace setup failed"; exit 1; }
# Info logs name the provider and interface each rank opened.
case ${XTQ_LOG_LEVEL:-warn} in error | warn) export XTQ_LOG_LEVEL=info ;; esac
export XTQ_PROVIDER=${XTQ_PROVIDER:-auto}
mh_log "$np ranks over $hosts hosts: $*"
mh_mpirun -np "$np" "${mopts[@]}" "$@" 2>&1 | tee "$MH_TMP/log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ] && [ "$check" = 1 ] && [ "$XTQ_PROVIDER" = auto ]; then
    mh_check_tcp "$MH_TMP/log" "$np" || rc=1
fi
mh_log "job exit $rc"
exit "$rc"
