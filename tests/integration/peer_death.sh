#!/usr/bin/env bash
# Kill one rank of four mid-stream; the three survivors must each report
# "survivor R ok". mpirun keeps them alive with --enable-recovery.
# Usage: peer_death.sh PROVIDER TEST_EXE MPIRUN...
set -u
prov=$1 exe=$2
shift 2
file=$(mktemp)
trap 'rm -f "$file"' EXIT
out=$("$@" --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 4 \
      -x XTQ_PROVIDER="$prov" -x XTQ_PEER_TIMEOUT_MS -x XTQ_FINALIZE_TIMEOUT_MS \
      "$exe" peer_death "$file" 2>&1)
rc=$?
echo "$out"
# A launcher that cannot run here (tests/multihost/mpirun.sh) skips.
[ "$rc" -eq 77 ] && exit 77
n=$(grep -c "^survivor [0-9] ok" <<<"$out")
echo "survivors ok: $n of 3"
[ "$n" -eq 3 ]
