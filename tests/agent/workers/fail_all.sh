#!/bin/bash
# Every rank fails by itself with exit code 10+LOCAL_RANK, about at once (ignoring the SIGTERM that the first
# failure makes ctrun send, so each exit code is its own).
trap '' TERM
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
sleep 0.$((3 + LOCAL_RANK))
exit $((10 + LOCAL_RANK))
