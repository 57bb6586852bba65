#!/bin/sh
# mpirun's rsh agent for hosts in network namespaces (lib.sh): Open MPI
# calls it as `nsrsh.sh HOST COMMAND...`, as it would call ssh; the
# command (an orted) runs inside namespace HOST. Only namespaces the
# multihost scripts made (xtqmh-*) are accepted.
host=$1
shift
case $host in
xtqmh-*) ;;
*)
    echo "nsrsh.sh: $host is not a multihost test namespace" >&2
    exit 1
    ;;
esac
if [ ! -e "/run/netns/$host" ]; then
    echo "nsrsh.sh: no network namespace $host" >&2
    exit 1
fi
# Each host gets its own temporary directory, as real hosts have their own
# /tmp: the orteds (one hostname for all) otherwise share Open MPI's session
# directory and PMIx's rendezvous files under /tmp, and one now and then
# failed to start (mpirun then waited for it for ever).
tmp=/tmp/$host
mkdir -p "$tmp" || exit 1
exec ip netns exec "$host" env TMPDIR="$tmp" sh -c "$*"
