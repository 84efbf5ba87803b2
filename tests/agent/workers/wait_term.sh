#!/bin/bash
# Waits for a signal; records which one reached it in $OUT_DIR/got_<LOCAL_RANK>.
trap 'echo TERM > "$OUT_DIR/got_$LOCAL_RANK"; exit 143' TERM
trap 'echo USR1 > "$OUT_DIR/got_$LOCAL_RANK"; exit 138' USR1
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
sleep 60 &
wait $!
