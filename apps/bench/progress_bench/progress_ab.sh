#!/bin/sh
# Progress records on vs off (the same binaries, CTRUN_COMM_PROGRESS=1/0), interleaved: ROUNDS rounds, each
# running ctbench's all_reduce at 8 B, 64 KiB and 16 MiB on 4 ranks once with records and once without, over
# tcp and shm. Prints each round's rank-0 times and the medians. Usage: progress_ab.sh BUILD_BIN_DIR [ROUNDS]
set -eu
bin=$1
rounds=${2:-5}
region=/dev/shm/ctrun-progress-ab-$$
"$bin/progress_bench" --make-region "$region" 4
trap 'rm -f "$region"' EXIT
out=$(mktemp)
for round in $(seq 1 "$rounds"); do
  for transport in tcp shm; do
    for records in 1 0; do
      CTRUN_PROGRESS_FILE=$region CTRUN_COMM_PROGRESS=$records \
        "$bin/ctbench" --no-gloo --nproc 4 --ops all_reduce --sizes 8,64K,16M --transport "$transport" \
        --iters-scale 1 2>/dev/null |
        awk -v t="$transport" -v r="$records" -v n="$round" \
          '/^# ctbench summary/{s=1} s && $1=="all_reduce" {print t, r, n, $2, $4}' >>"$out"
    done
  done
done
echo "# transport records round bytes ctrun_us"
cat "$out"
echo "# medians (us): transport bytes on off off/on"
for transport in tcp shm; do
  for bytes in 8 65536 16777216; do
    on=$(awk -v t=$transport -v b=$bytes '$1==t && $2==1 && $4==b {print $5}' "$out" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    off=$(awk -v t=$transport -v b=$bytes '$1==t && $2==0 && $4==b {print $5}' "$out" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$transport $bytes $on $off $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", b/a}')"
  done
done
rm -f "$out"
