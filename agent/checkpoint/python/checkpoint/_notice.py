"""Notices to the agent (agent/checkpoint/notices.hpp): one datagram per commit, load or refused save, sent without
blocking; a notice the agent cannot take costs only its event-log line."""

import json
import os
import socket

from . import _contract


def send(directory, **fields):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(json.dumps(fields).encode(), os.path.join(directory, _contract.NOTICE_SOCKET))
    except OSError:
        pass
