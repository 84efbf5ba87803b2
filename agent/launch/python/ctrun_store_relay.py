"""The workers' side of ctrun's store relay (issue 44; the agent's side: agent/launch/store_relay.hpp).

With several nodes every ctrun agent runs a store relay on loopback and names it in each worker's environment as
CTRUN_STORE_RELAY=host:port. MASTER_ADDR and MASTER_PORT keep naming the job's store (on group rank 0's node), as
torchrun sets them, for the programs that read them. install() makes torch's env:// and tcp:// rendezvous in
agent-store mode (TORCHELASTIC_USE_AGENT_STORE=True: init_process_group, init_device_mesh, ...) connect their
TCPStore to the relay whenever they would connect to MASTER_ADDR:MASTER_PORT; everything built on that store (gloo,
NCCL's id exchange, new_group, DTensor, DCP) then goes through it. common/worker_env.hpp states the same rule for
comm's env://.

Nothing of torch is imported here: until torch.distributed.rendezvous is imported, a finder on sys.meta_path waits
for it and patches it right after it runs (a module imported earlier, in --preload's warm process say, is patched at
once). ctrun's sitecustomize calls install() when CTRUN_STORE_RELAY is set.
"""

import os
import sys

_MODULE = "torch.distributed.rendezvous"
_PATCHED = "_ctrun_store_relay"


def relay_endpoint():
    """(host, port) of this node's relay, or None when CTRUN_STORE_RELAY is unset or not host:port."""
    host, sep, port = os.environ.get("CTRUN_STORE_RELAY", "").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def redirected(hostname, port):
    """Where a client of the store at hostname:port connects: the relay when it is the job's store (agent-store mode,
    MASTER_ADDR:MASTER_PORT) and a relay is set; else hostname:port unchanged."""
    relay = relay_endpoint()
    if relay is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return hostname, port
    if hostname != os.environ.get("MASTER_ADDR") or str(port) != os.environ.get("MASTER_PORT"):
        return hostname, port
    return relay


def patch(module):
    """Wraps module._create_c10d_store (torch 1.13 and 2.x: (hostname, port, rank, world_size, timeout, ...))."""
    if getattr(module, _PATCHED, False):
        return
    original = module._create_c10d_store

    def _create_c10d_store(hostname, port, *args, **kwargs):
        hostname, port = redirected(hostname, port)
        return original(hostname, port, *args, **kwargs)

    _create_c10d_store.__doc__ = original.__doc__
    _create_c10d_store.__wrapped__ = original
    module._create_c10d_store = _create_c10d_store
    setattr(module, _PATCHED, True)


class _Finder:
    """On sys.meta_path until torch.distributed.rendezvous is imported: finds it with the other finders and patches
    it once its loader has run it."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            patch(module)
            _remove_finder()

        loader.exec_module = exec_module
        return spec


def _remove_finder():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]


def install():
    """Points torch's agent-store rendezvous at the relay (a no-op without CTRUN_STORE_RELAY)."""
    if relay_endpoint() is None:
        return
    module = sys.modules.get(_MODULE)
    if module is not None:
        patch(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
