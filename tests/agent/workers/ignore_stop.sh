#!/bin/bash
# Rank 0 fails at once; the others ignore SIGTERM and SIGINT (only SIGKILL stops them).
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
if [ "$LOCAL_RANK" = 0 ]; then sleep 0.3; exit 3; fi
trap '' TERM INT
exec sleep 60
