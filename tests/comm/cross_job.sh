#!/bin/sh
# The cross-job group: a ctstore and two separately launched 2-rank jobs (under ctrun when built, else
# comm_launch) form one 4-rank group through the store. Exits 77 (ctest: skipped) without ctstore.
# usage: cross_job.sh BIN_DIR
bin="$1"
[ -x "$bin/ctstore" ] || { echo "skipped: $bin/ctstore is not built"; exit 77; }
out=$(mktemp)
"$bin/ctstore" --host 127.0.0.1 --port 0 > "$out" 2>&1 &
store=$!
trap 'kill $store 2>/dev/null; rm -f "$out"' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$out" | head -n1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "ctstore did not start:"; cat "$out"; exit 1; }
here=$(dirname "$0")
sh "$here/run_example.sh" "$bin" 2 example_cross_job --store "127.0.0.1:$port" --job 0 --jobs 2 &
job0=$!
sh "$here/run_example.sh" "$bin" 2 example_cross_job --store "127.0.0.1:$port" --job 1 --jobs 2
rc1=$?
wait $job0
rc0=$?
echo "job 0 exit $rc0, job 1 exit $rc1"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]
