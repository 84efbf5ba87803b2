#!/bin/bash
# Records MASTER_ADDR, MASTER_PORT and whether a server answers there (the agent's store).
if exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT"; then found=connected; else found=refused; fi
echo "$MASTER_ADDR $MASTER_PORT $found" > "$OUT_DIR/got_$LOCAL_RANK"
