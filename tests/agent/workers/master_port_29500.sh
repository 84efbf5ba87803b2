#!/bin/bash
# A script that relies on torchrun's default MASTER_PORT 29500: it connects there itself and records what it found.
export MASTER_PORT=29500
if exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT"; then echo connected > "$OUT_DIR/got_$LOCAL_RANK"; else echo refused > "$OUT_DIR/got_$LOCAL_RANK"; fi
