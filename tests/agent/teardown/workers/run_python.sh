#!/bin/sh
# A --no-python worker that runs a Python program: `run_python.sh exec PYTHON ARGS...` becomes the interpreter (the
# worker process is Python); `run_python.sh child PYTHON ARGS...` runs it as a child and exits with its status.
mode=$1
shift
if [ "$mode" = exec ]; then
  exec "$@"
fi
"$@"
exit $?
