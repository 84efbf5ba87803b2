#!/bin/sh
# Writes the worker's whole environment to $OUT_DIR/env_<LOCAL_RANK>.
env > "$OUT_DIR/env_tmp_$LOCAL_RANK" && mv "$OUT_DIR/env_tmp_$LOCAL_RANK" "$OUT_DIR/env_$LOCAL_RANK"
