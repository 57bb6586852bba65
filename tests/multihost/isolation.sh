#!/usr/bin/env bash
# Isolation between jobs on two hosts (network namespaces, lib.sh): the
# victim job runs on h0, the attacker job on h1 aims at the victim's tcp
# endpoint across the bridge (tests/integration/test_isolation.c).
# Usage: isolation.sh TEST_EXE
set -u
. "$(dirname "$0")/lib.sh"
exe=$1
mh_require
MH_TMP=$(mktemp -d)
mh_setup 2 || { mh_log "namespace setup failed"; exit 1; }
export XTQ_PROVIDER=tcp
XTQ_JOB_KEY=victim-job timeout -k 5 100 ip netns exec "${MH_HOSTS[0]}" "$exe" victim "$MH_TMP" &
victim=$!
XTQ_JOB_KEY=attacker-job XTQ_FINALIZE_TIMEOUT_MS=500 \
    timeout -k 5 100 ip netns exec "${MH_HOSTS[1]}" "$exe" attacker "$MH_TMP"
arc=$?
wait "$victim"
vrc=$?
mh_log "victim on $(mh_addr 0), attacker on $(mh_addr 1)"
echo "victim exit $vrc, attacker exit $arc"
[ "$vrc" -eq 0 ] && [ "$arc" -eq 0 ]
