#!/usr/bin/env bash
# Run a test program; pass only when it exits 0 AND its output matches an
# extended regular expression. (CTest's PASS_REGULAR_EXPRESSION alone
# ignores the exit code: a program that printed the line and then crashed
# passed.) Usage: expect_output.sh REGEX COMMAND [ARGS...]
set -u
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "expect_output: exit code $rc" >&2
  exit "$rc"
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_output: no line matches /$regex/" >&2
  exit 1
fi
