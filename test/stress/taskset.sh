#!/bin/sh
# test/stress/taskset.sh PROGRAM ARGS... — runs PROGRAM restricted to the highest
# online CPU id (a process allowed 1 of the machine's CPUs, and not CPU 0), as a
# cgroup or taskset restriction leaves it; fails when PROGRAM fails.
set -eu
last=$(sed 's/.*[,-]//' /sys/devices/system/cpu/online)
echo "taskset: running on CPU $last only"
exec taskset -c "$last" "$@"
