#!/usr/bin/env bash
# The data-path locks, XTQ_MUTEX=spin (polls, then sleeps) against adaptive
# (glibc's PTHREAD_MUTEX_ADAPTIVE_NP): bench/ab_compare.sh with those two
# settings, results in bench/results/<machine>/mutex.txt ("B/A" is
# adaptive/spin). Same arguments and environment as ab_compare.sh.
exec env VAR=XTQ_MUTEX A=spin B=adaptive NAME=mutex "$(dirname "$0")/ab_compare.sh" "$@"
