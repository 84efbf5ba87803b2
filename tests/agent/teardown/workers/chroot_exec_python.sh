#!/bin/sh
# python3 of the torch 2.6 chroot (tests/torch2) as the worker process itself: exec all the way, so that the process
# ctrun started is the interpreter (ctrun counts a worker's exit record only when that process wrote it). The
# chroot's mounts (/proc, /dev, the repository at its own path) must be held meanwhile by a `torch2_chroot.sh run`
# of the caller (teardown_torch_test.py torch26 holds one); the working directory inside is /.
exec chroot "${CHROOT_DIR:-/opt/torch2-chroot}" /usr/bin/python3 "$@"
