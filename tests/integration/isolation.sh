#!/usr/bin/env bash
# Two independent jobs on this host over tcp (separate launches, different
# job keys); the attacker aims at the victim. Usage: isolation.sh TEST_EXE
set -u
exe=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export XTQ_PROVIDER=tcp
XTQ_JOB_KEY=victim-job "$exe" victim "$dir" &
victim=$!
XTQ_JOB_KEY=attacker-job XTQ_FINALIZE_TIMEOUT_MS=500 "$exe" attacker "$dir"
arc=$?
wait "$victim"
vrc=$?
echo "victim exit $vrc, attacker exit $arc"
[ "$vrc" -eq 0 ] && [ "$arc" -eq 0 ]
