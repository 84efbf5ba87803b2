#!/bin/bash
# MODE=exit: succeeds at once. MODE=fail: fails at once. Otherwise waits for SIGTERM like wait_term.sh.
echo $$ > "$OUT_DIR/pid_${NODE_TAG}_$LOCAL_RANK"
case "$MODE" in
  exit) exit 0 ;;
  fail) exit 1 ;;
esac
trap 'exit 143' TERM
sleep 60 &
wait $!
