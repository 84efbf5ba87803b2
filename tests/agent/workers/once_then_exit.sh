#!/bin/bash
# First start of a local rank: waits (until stopped); any later start: exits 0 at once. Records every start.
echo "$TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE" >> "$OUT_DIR/starts_$LOCAL_RANK"
[ -e "$OUT_DIR/seen_$LOCAL_RANK" ] && exit 0
touch "$OUT_DIR/seen_$LOCAL_RANK"
exec sleep 60
