#!/bin/bash
# Fails (exit 4) on every attempt below $SUCCEED_AT (default 1), succeeds from then on; prints its attempt.
echo "attempt $TORCHELASTIC_RESTART_COUNT rank $RANK"
[ "$TORCHELASTIC_RESTART_COUNT" -ge "${SUCCEED_AT:-1}" ] && exit 0
[ "$RANK" = 0 ] && sleep 0.2 && exit 4
sleep 60 &
wait $!
