#!/bin/bash
# restart_bench's worker. Local rank 0 fails on every attempt but the last; its replacement's first action is
# to record when it started. Timestamps come from bash's $EPOCHREALTIME (no fork), appended to $BENCH_OUT.
echo "start $TORCHELASTIC_RESTART_COUNT $LOCAL_RANK $EPOCHREALTIME" >> "$BENCH_OUT"
if [ "$TORCHELASTIC_RESTART_COUNT" -ge "$BENCH_RESTARTS" ]; then exit 0; fi
if [ "$LOCAL_RANK" = 0 ]; then
  sleep 0.05
  echo "fail $TORCHELASTIC_RESTART_COUNT $LOCAL_RANK $EPOCHREALTIME" >> "$BENCH_OUT"
  exit 1
fi
exec sleep 60
