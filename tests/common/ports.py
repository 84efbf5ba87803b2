"""Ports for tests, without the pick-release-bind race (the Python side of tests/support/port_reservation.hpp).

Where a program of ours binds, give it port 0 and read the port back (ctstore prints "ctstore listening on H:P";
ctrun's event log reports it: agent_start's master_port and rdzv_store). A program that must be told its port
before it starts (etcd's peer URLs, one --master-port that a launcher hands to several agents at once, torch's
tcp:// init) gets a reserved port: a socket bound to it with SO_REUSEADDR that never listens. While it is held no
other bind takes the port (a bind to port 0 never picks a bound port; an explicit one without SO_REUSEADDR is
refused), yet the program binds and listens there (ctrun's store, etcd, torch's TCPStore and sshd set
SO_REUSEADDR; Linux lets it share the port with a bound socket that does not listen).

    port = reserve_port()            # held until the test process exits, or release_ports()
"""
import socket

_held = []


def reserve_port(host="0.0.0.0"):
    """A port that stays reserved (see above) until release_ports() or the end of the process. The default host,
    every IPv4 address, keeps it from every other bind to any address while the program binds its own one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    _held.append(s)
    return s.getsockname()[1]


def release_ports():
    while _held:
        _held.pop().close()
