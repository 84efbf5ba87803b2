#!/bin/bash
# Attempt 0: node a floods stdout (20 MB) then waits for SIGTERM; node b waits until a has flooded, then fails.
# Attempt >= 1: every rank succeeds.
[ "$TORCHELASTIC_RESTART_COUNT" -ge 1 ] && exit 0
if [ "$NODE_TAG" = a ]; then
  yes 'flood-line-0123456789012345678901234567890123456789012345678901234567890123456789012345678901234' \
    | head -n 200000
  echo done > "$OUT_DIR/flooded"
  trap 'exit 143' TERM
  sleep 60 &
  wait $!
  exit 0
fi
for _ in $(seq 1200); do [ -e "$OUT_DIR/flooded" ] && break; sleep 0.05; done
exit 4
