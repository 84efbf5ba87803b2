#!/bin/sh
# Lists the descriptors the worker got into $OUT_DIR/fds_<LOCAL_RANK> (ls's own listing descriptor, a
# /proc/<pid>/fd, is among them) and records MASTER_ADDR/MASTER_PORT. With DAEMON=1 it then leaves a double-forked
# daemon with an empty environment (the one kind that outlives kill -9 of ctrun, agent/process/escapees.hpp),
# records its pid, and waits.
d=$OUT_DIR
r=$LOCAL_RANK
ls -l /proc/self/fd > "$d/fds_tmp_$r" 2>&1
echo "$MASTER_ADDR $MASTER_PORT" > "$d/store_$r"
if [ "$DAEMON" = 1 ]; then
  ( env -i /usr/bin/setsid /bin/sh -c 'echo $$ > "$1"; exec sleep 60' sh "$d/daemon_tmp_$r" & )
  for _ in $(seq 400); do [ -s "$d/daemon_tmp_$r" ] && break; sleep 0.05; done
  mv "$d/daemon_tmp_$r" "$d/daemon_$r"
fi
mv "$d/fds_tmp_$r" "$d/fds_$r"
[ "$DAEMON" = 1 ] && exec sleep 60
exit 0
