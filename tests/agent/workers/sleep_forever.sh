#!/bin/bash
# Records its pid, then becomes a process that ignores SIGTERM (only ctrun's parent-death SIGKILL ends it).
echo $$ > "$OUT_DIR/pid_$LOCAL_RANK"
trap '' TERM
exec sleep 60
