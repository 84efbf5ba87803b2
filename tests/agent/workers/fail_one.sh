#!/bin/bash
# Rank $FAIL_RANK exits with $FAIL_CODE (or kills itself with $FAIL_SIGNAL) once every rank is up; the others
# wait, and record a SIGTERM in $OUT_DIR/term_<LOCAL_RANK> when ctrun stops them.
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
if [ "$RANK" = "$FAIL_RANK" ]; then
  for _ in $(seq 200); do
    [ "$(ls "$OUT_DIR" | grep -c '^pid_')" -ge "$WORLD_SIZE" ] && break
    sleep 0.02
  done
  if [ -n "$FAIL_SIGNAL" ]; then kill -"$FAIL_SIGNAL" $$; fi
  exit "${FAIL_CODE:-3}"
fi
trap 'echo term > "$OUT_DIR/term_$LOCAL_RANK"; exit 143' TERM
sleep 60 &
wait $!
