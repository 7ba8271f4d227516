"""Starting Ray for the toy RL system: a small local instance by default, a cluster when given
its address (book chapter "A mini RL system on Ray").

Locally Ray starts a head node in this machine: a GCS, a raylet with its shared-memory object
store, a few helper processes, then one Python process per actor. The defaults keep that small
enough for a 2 GB Binder and CI's 2 cores: at most 2 CPUs, a 150 MiB object store (the toy
model's weights are 0.4 MB, a rollout batch a few kB), no dashboard, worker logs not streamed
to the notebook. With ``address`` the same code joins an existing cluster (``"auto"``, or
``"ray://host:10001"`` through Ray Client) and ships this library to its workers.
"""
from __future__ import annotations

import os
import socket
import time

import ray

from ..checks import check_int

__all__ = ["DEFAULT_OBJECT_STORE_BYTES", "MIN_OBJECT_STORE_BYTES", "local_num_cpus", "init_ray",
           "check_address", "local_footprint_bytes", "shutdown_ray"]

DEFAULT_OBJECT_STORE_BYTES = 150 * 2**20
"""Object store of a local instance: 150 MiB."""
MIN_OBJECT_STORE_BYTES = 75 * 2**20
"""Ray's smallest object store (``ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES``)."""
NAMESPACE = "rlmperf"


def local_num_cpus(cap: int = 2) -> int:
    """CPUs this process may use (its affinity mask, not the host's count), at most ``cap``."""
    check_int("cap", cap, 1)
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:                       # macOS, Windows
        available = os.cpu_count() or 1
    return max(1, min(available, cap))


def init_ray(address: str | None = None, *, num_cpus: int | None = None,
             object_store_memory_bytes: int = DEFAULT_OBJECT_STORE_BYTES,
             namespace: str = NAMESPACE, runtime_env: dict | None = None) -> dict:
    """Start (or join) Ray once per process; a no-op returning the same summary if it is up.

    Args:
        address: None starts a local instance; otherwise the cluster to join ("auto" for the
            one this machine belongs to, "ray://host:10001" for Ray Client).
        num_cpus: local CPUs Ray schedules on; None =
            :func:`~rlmperf_lite.distributed.local_num_cpus` (at most 2).
        object_store_memory_bytes: local object store size (>= 75 MiB).
        namespace: Ray namespace of this run's actors.
        runtime_env: for a cluster; None ships this library (``py_modules``) so the workers
            import the same code.
    Returns:
        {"address", "num_cpus", "object_store_memory_bytes", "startup_s"}.
    Raises:
        ValueError: naming the bad argument, or setting local sizes together with ``address``;
            naming ``address`` when it is malformed, nothing answers there within 5 s, or it is
            a Ray Client address (``ray://``) and the client extra is not installed.
    """
    if address is not None and not isinstance(address, str):
        raise ValueError(f"address must be None (local Ray) or a cluster address string, "
                         f"got {address!r}")
    check_int("num_cpus", num_cpus, 1, optional=True)
    check_int("object_store_memory_bytes", object_store_memory_bytes, MIN_OBJECT_STORE_BYTES)
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a non-empty string, got {namespace!r}")
    if address is not None and (num_cpus is not None
                                or object_store_memory_bytes != DEFAULT_OBJECT_STORE_BYTES):
        raise ValueError("num_cpus and object_store_memory_bytes size a local instance; a "
                         "cluster (address given) has its own: leave them unset")
    if address is not None and not ray.is_initialized():
        check_address(address)
    t0 = time.perf_counter()
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")     # no phone-home at start
        if address is None:
            ray.init(num_cpus=num_cpus or local_num_cpus(),
                     object_store_memory=object_store_memory_bytes, include_dashboard=False,
                     log_to_driver=False, namespace=namespace)
        else:
            import rlmperf_lite
            env = runtime_env if runtime_env is not None else {"py_modules": [rlmperf_lite]}
            try:
                ray.init(address=address, namespace=namespace, runtime_env=env,
                         log_to_driver=False)
            except ConnectionError as err:
                raise ValueError(f"address={address!r}: {err}") from err
    resources = ray.cluster_resources()
    return {"address": ray.get_runtime_context().gcs_address,
            "num_cpus": resources.get("CPU", 0.0),
            "object_store_memory_bytes": resources.get("object_store_memory", 0.0),
            "startup_s": time.perf_counter() - t0}


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a cluster ``address`` that Ray would retry for minutes: malformed, or nothing
    listening there within ``timeout_s`` seconds (``"auto"`` is left to Ray, which answers at
    once). Called by :func:`init_ray` before it joins a cluster; when Ray is already up in this
    process, :func:`init_ray` returns the running instance's summary and ignores ``address``.

    Raises:
        ValueError: naming ``address``.
    """
    if address in ("auto", "local"):
        return                                  # Ray itself answers at once if there is none
    hostport = address
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401 - Ray Client's transport
        except ImportError:
            raise ValueError(f"address={address!r} is a Ray Client address, which needs "
                             f"Ray's client extra: pip install 'ray[client]'") from None
        hostport = address[len("ray://"):]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address={address!r} must be 'auto', 'host:port' (a head node's GCS, "
                         f"as `ray start --head` prints it) or 'ray://host:port' (Ray Client)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ValueError(f"address={address!r}: nothing answers at {host}:{port} ({err}); "
                         f"start the head node (`ray start --head`) or check the address"
                         ) from None


def local_footprint_bytes() -> int:
    """Resident memory (bytes) of this process and all its descendants: with a local Ray
    started here (:func:`init_ray` without an address), its GCS, raylet, helper processes and
    every actor — what a 2 GB Binder must hold. Pages shared by several processes (the object
    store, libraries) count once per process, so this is an upper bound."""
    import psutil
    me, total = psutil.Process(), 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:                    # exited meanwhile
            pass
    return total


def shutdown_ray() -> None:
    """Stop (or leave) Ray; its local processes exit."""
    ray.shutdown()
