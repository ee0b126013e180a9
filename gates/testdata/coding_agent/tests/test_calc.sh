#!/bin/sh
# The policy forbids agents to edit anything under tests/.
set -eu
got=$(sh src/calc.sh add 2 2)
if [ "$got" != 4 ]; then
	echo "FAIL: add 2 2 = $got, want 4"
	exit 1
fi
echo "PASS"
