#!/bin/sh
# A/B of two ctbench binaries on a loaded machine: runs them alternately ROUNDS times with the same arguments
# and prints, per (op, bytes), the best (lowest) time of each and the ratio B/A time. Best-of-N is the robust
# estimator when other processes steal the cores; alternating puts both under the same load.
#   scripts/bench/ctbench_ab.sh OLD_CTBENCH NEW_CTBENCH ROUNDS [ctbench args...]
set -eu
a=$1; b=$2; rounds=$3; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
  for which in a b; do
    bin=$a; [ "$which" = b ] && bin=$b
    timeout 600 "$bin" --no-gloo "$@" 2>/dev/null | awk -v w="$which" '/\|/ && $1 ~ /^[a-z_]+$/ && $2 ~ /^[0-9]+$/ {print w, $1, $2, $4}' >>"$tmp/rows"
  done
  i=$((i + 1))
done
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds; best time (us) of each; args: $*"
awk '{k=$2" "$3; if (!(k in seen)) {order[n++]=k; seen[k]=1}
      if ($1=="a" && (!(k in A) || $4<A[k])) A[k]=$4; if ($1=="b" && (!(k in B) || $4<B[k])) B[k]=$4}
     END {printf "%-15s %12s %12s %12s %8s\n", "op", "bytes", "A_us", "B_us", "B/A";
          for (i=0;i<n;i++) {split(order[i], p, " "); printf "%-15s %12s %12.1f %12.1f %8.2f\n", p[1], p[2], A[order[i]], B[order[i]], B[order[i]]/A[order[i]]}}' "$tmp/rows"
