#!/bin/bash
# Records every SIGUSR1/SIGUSR2 that reaches it in $OUT_DIR/got_<LOCAL_RANK> and keeps running; exits 0 on
# SIGUSR2 (so a test can end the job through it), or after 60 s.
trap 'echo USR1 >> "$OUT_DIR/got_$LOCAL_RANK"' USR1
trap 'echo USR2 >> "$OUT_DIR/got_$LOCAL_RANK"; exit 0' USR2
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
for _ in $(seq 600); do
  sleep 0.1 &
  wait $!
done
