#!/bin/bash
# Writes $LINES lines of 100 bytes to stdout as fast as it can, records that it is done, then waits for SIGTERM.
yes 'flood-line-0123456789012345678901234567890123456789012345678901234567890123456789012345678901234' \
  | head -n "${LINES:-100000}"
echo done > "$OUT_DIR/done_$LOCAL_RANK"
trap 'exit 143' TERM
sleep 60 &
wait $!
