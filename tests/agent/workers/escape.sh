#!/bin/bash
# Leaves four processes outside its process group and records their pids: one in a new process group, one in a
# new session (setsid), one double-forked daemon (its parent exits at once),
# one such daemon with an empty environment. Then, by $MODE: exit (0), fail (1),
# or wait for SIGTERM.
d=$OUT_DIR
r=$LOCAL_RANK
/usr/bin/python3 -c 'import os,sys; os.setpgid(0,0); open(sys.argv[1],"w").write(str(os.getpid())); os.execvp("sleep",["sleep","300"])' "$d/esc_pgrp_$r" &
setsid sh -c 'echo $$ > "$1"; exec sleep 300' sh "$d/esc_setsid_$r" &
( setsid sh -c 'echo $$ > "$1"; exec sleep 300' sh "$d/esc_daemon_$r" & )
# A double-forked daemon that also clears its environment (no CTRUN_JOB_TOKEN): only the subreaper finds it.
( env -i /usr/bin/setsid /bin/sh -c 'echo $$ > "$1"; exec sleep 300' sh "$d/esc_noenv_$r" & )
for _ in $(seq 400); do
  [ -s "$d/esc_pgrp_$r" ] && [ -s "$d/esc_setsid_$r" ] && [ -s "$d/esc_daemon_$r" ] && [ -s "$d/esc_noenv_$r" ] && break
  sleep 0.05
done
echo $$ > "$d/pid_$r"
case "$MODE" in
  exit) exit 0 ;;
  fail) exit 1 ;;
esac
trap 'exit 143' TERM
sleep 60 &
wait $!
