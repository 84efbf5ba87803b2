#!/bin/bash
# Writes $LINES lines to stdout and a few to stderr, each line in three separate write()s so that a router that
# does not reassemble lines would interleave ranks mid-line.
n=${LINES:-200}
for i in $(seq "$n"); do
  printf 'rank %s line %s ' "$LOCAL_RANK" "$i"
  printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'
  printf ' end\n'
done
echo "err from $LOCAL_RANK" >&2
