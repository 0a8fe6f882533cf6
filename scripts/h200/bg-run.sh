#!/usr/bin/env bash
# On the device: one pytest session that outlives a call (a call is at most 10 minutes; a session in
# one process keeps its engines and its probes' rounds, which a chain of --voiceperf-resume calls
# measures again). The process runs in its own session (setsid), so it lives while the machine is
# held; the next call must come within the machine's idle release (30 s).
#   scripts/h200/bg-run.sh start NAME LIMIT_S [pytest args...]  start; SIGINT after LIMIT_S
#   scripts/h200/bg-run.sh wait NAME MAX_S                     wait for it (at most MAX_S), copy
#                                                              /tmp/keep/NAME.* to $OUT
set -uo pipefail
cmd=$1 name=$2
mkdir -p /tmp/keep
case "$cmd" in
  start)
    limit=$3; shift 3
    OUT=/tmp/keep setsid nohup timeout -s INT -k 20 "$limit" bash scripts/h200/run-claims.sh "$name" "$@" \
      > "/tmp/keep/$name.out" 2>&1 < /dev/null &
    echo $! > "/tmp/keep/$name.pid"
    echo "started $name (pid $(cat /tmp/keep/$name.pid), SIGINT after ${limit} s)";;
  wait)
    max=$3 t0=$(date +%s)
    while kill -0 "$(cat /tmp/keep/$name.pid)" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$max" ]; do
      sleep 5
    done
    if kill -0 "$(cat /tmp/keep/$name.pid)" 2>/dev/null; then echo "== $name still running"; else echo "== $name ended"; fi
    grep -E "PASSED|FAILED|UNMEASURED|XFAIL|ERROR" "/tmp/keep/$name.log" 2>/dev/null | grep "::" | cut -c1-160 | tail -60
    tail -4 "/tmp/keep/$name.out"
    cp /tmp/keep/"$name".* "$OUT"/ 2>/dev/null; ls -la "$OUT";;
esac
