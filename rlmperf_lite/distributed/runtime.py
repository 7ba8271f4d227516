"""Starting Ray for the toy RL system: a small local instance by default, a cluster when given
its address (book chapter "A mini RL system on Ray").

Locally Ray starts a head node in this machine: a GCS, a raylet with its shared-memory object
store, a few helper processes, then one Python process per actor. The defaults keep that small
enough for a 2 GB Binder and CI's 2 cores: at most 2 CPUs, a 150 MiB object store (the toy
model's weights are 0.4 MB, a rollout batch a few kB), no dashboard, worker logs not streamed
to the notebook. With ``address`` the same code joins an existing cluster (``"auto"``, or
``"ray://host:10001"`` through Ray Client) and ships this library to its workers.
:class:`LocalCluster` starts several Ray nodes on this machine, on loopback, for the multi-node
runs of book section sec-ray-multinode.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import time

import ray

from ..checks import check_int

__all__ = ["DEFAULT_OBJECT_STORE_BYTES", "MIN_OBJECT_STORE_BYTES", "local_num_cpus", "init_ray",
           "check_address", "local_footprint_bytes", "shutdown_ray", "alive_node_ids",
           "LocalCluster"]

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


def _token_auth_enabled_note(record: logging.LogRecord) -> bool:
    """False for Ray's note that it turned token authentication on for a new local instance (Ray
    2.5x+): the secure default, not a problem, yet a red box at the top of a lab. Ray's warning
    that authentication is *off* still shows."""
    return not record.getMessage().startswith("Token authentication is enabled")


def _start_local(num_cpus: int, object_store_memory_bytes: int, namespace: str) -> None:
    """A new local instance (even if `ray start` ran here), without Ray's note on token auth."""
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    auth_log.addFilter(_token_auth_enabled_note)
    try:
        ray.init(address="local", num_cpus=num_cpus,
                 object_store_memory=object_store_memory_bytes, include_dashboard=False,
                 log_to_driver=False, namespace=namespace)
    finally:
        auth_log.removeFilter(_token_auth_enabled_note)


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
            naming ``address`` when it is malformed, nothing answers there within 5 s, the
            cluster refuses this process (e.g. it asks for Ray's token authentication), or it
            is a Ray Client address (``ray://``) and the client extra is not installed.
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
            _start_local(num_cpus or local_num_cpus(), object_store_memory_bytes, namespace)
        else:
            import rlmperf_lite
            env = runtime_env if runtime_env is not None else {"py_modules": [rlmperf_lite]}
            try:
                ray.init(address=address, namespace=namespace, runtime_env=env,
                         log_to_driver=False)
            except ConnectionError as err:
                auth = "Authentication" in f"{err} {err.__cause__}"   # Ray 2.60: tokens
                raise ValueError(f"address={address!r}: {err}" + (
                    "; the cluster asks for Ray's token authentication: set RAY_AUTH_MODE=token "
                    "and its token (RAY_AUTH_TOKEN, or ~/.ray/auth_token) in this environment"
                    if auth else "")) from err
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
    """Memory (bytes) this process and all its descendants hold together: with a local Ray
    started here (:func:`init_ray` without an address), its GCS, raylet, helper processes and
    every actor — what a Binder's memory limit must hold. The sum of their proportional set
    sizes (PSS: a page that n of them share counts 1/n in each), so the object store and the
    libraries count once; where the OS reports no PSS (macOS, Windows), their resident sizes,
    which count shared pages once per process (an upper bound)."""
    import psutil
    me, total = psutil.Process(), 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.Error:                    # exited meanwhile, or not ours to read
            pass
    return total


def shutdown_ray() -> None:
    """Stop (or leave) Ray; its local processes exit."""
    ray.shutdown()


def alive_node_ids() -> list:
    """Ids (hex) of the Ray nodes alive now: this process's node first, then the others in the
    order of their ids (Ray must be up)."""
    me = ray.get_runtime_context().get_node_id()
    others = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != me)
    return [me, *others]


class LocalCluster:
    """Several Ray nodes on this machine, each with its own raylet, object store and CPUs, all
    on loopback (127.0.0.1), started with Ray's test harness ``ray.cluster_utils.Cluster``: a
    multi-node cluster without a second machine (book section sec-ray-multinode). Node 0 is the
    head (it holds the GCS, and the driver attaches to it); node k also offers one unit of the
    custom resource ``f"local_node_{k}"``. Join it with ``init_ray(cluster.address)``; use it
    as a context manager, or call :meth:`shutdown`, which stops every process it started.

    Args:
        num_nodes: nodes to start, >= 1.
        num_cpus_per_node: CPUs each node offers, >= 1.
        object_store_memory_bytes: each node's object store, >= 75 MiB.
    Raises:
        ValueError: naming the bad argument.
    """

    def __init__(self, num_nodes: int = 2, *, num_cpus_per_node: int = 1,
                 object_store_memory_bytes: int = MIN_OBJECT_STORE_BYTES):
        check_int("num_nodes", num_nodes, 1)
        check_int("num_cpus_per_node", num_cpus_per_node, 1)
        check_int("object_store_memory_bytes", object_store_memory_bytes,
                  MIN_OBJECT_STORE_BYTES)
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster
        self._sizes = {"num_cpus": num_cpus_per_node,
                       "object_store_memory": object_store_memory_bytes}
        # a short directory of its own: Ray's socket paths must fit in 107 bytes, and its
        # address file (ray_current_cluster) must not send other processes' ray.init() here
        self.temp_dir = tempfile.mkdtemp(prefix="rlmperf_ray_", dir="/tmp")
        self._saved = os.environ.get("RAY_TMPDIR"), ray_constants.ENABLE_RAY_CLUSTER
        os.environ["RAY_TMPDIR"] = self.temp_dir
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # Ray replaces 127.0.0.1 by this machine's routable address when a driver connects
        # (ray._private.services.get_node_ip_address) unless this flag, its switch for
        # one-machine clusters on Windows and macOS, is off: off, everything stays on loopback
        ray_constants.ENABLE_RAY_CLUSTER = False
        self.nodes, self._removed = [], set()
        try:
            self.cluster = Cluster(initialize_head=True, head_node_args={
                **self._node_args(0), "include_dashboard": False, "no_monitor": True})
            self.nodes.append(self.cluster.head_node)
            for _ in range(1, num_nodes):
                self.add_node()
        except Exception:
            self.shutdown()
            raise

    def _node_args(self, index: int) -> dict:
        return {**self._sizes, "node_ip_address": "127.0.0.1", "include_log_monitor": False,
                "resources": {f"local_node_{index}": 1.0}}

    @property
    def address(self) -> str:
        """The head's GCS address, ``127.0.0.1:port``."""
        return self.cluster.address

    @property
    def node_ids(self) -> list:
        """Each node's Ray id (hex), by index; removed nodes keep their place."""
        return [node.node_id for node in self.nodes]

    @property
    def running(self) -> list:
        """Indices of the nodes not removed, the head (0) first."""
        return [k for k in range(len(self.nodes)) if k not in self._removed]

    def add_node(self) -> int:
        """Start one more node (waits until it has joined); returns its index."""
        self.nodes.append(self.cluster.add_node(**self._node_args(len(self.nodes))))
        return len(self.nodes) - 1

    def remove_node(self, index: int) -> None:
        """Kill every process of node ``index`` (its raylet, object store, agents and the
        actors on it): a node lost, as a machine that fails.

        Raises:
            ValueError: naming ``index`` when it is the head (its loss ends the cluster and
                the driver), out of range or already removed.
        """
        running = self.running[1:]
        if isinstance(index, bool) or index not in running:
            raise ValueError(f"index={index!r} must name a running node other than the head "
                             f"(0): one of {running}")
        self.cluster.remove_node(self.nodes[index])
        self._removed.add(index)

    def leftover_pids(self) -> list:
        """PIDs of processes still running that this cluster started (its Ray processes and
        actors carry its temporary directory in their command line or environment)."""
        import psutil
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if self.temp_dir in " ".join(proc.info["cmdline"] or ()) or \
                        proc.environ().get("RAY_TMPDIR") == self.temp_dir:
                    found.append(proc.info["pid"])
            except psutil.Error:                # exited, or not ours to read
                pass
        return [pid for pid in found if pid != os.getpid()]

    def shutdown(self) -> None:
        """Leave the cluster (``ray.shutdown``), stop every node, restore the environment and
        delete the temporary directory."""
        from ray._private import ray_constants
        if ray.is_initialized():
            ray.shutdown()
        if getattr(self, "cluster", None) is not None:
            self.cluster.shutdown()
            self.cluster = None
        for pid in self.leftover_pids():         # e.g. a node that failed to start
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        tmpdir, ray_constants.ENABLE_RAY_CLUSTER = self._saved
        if tmpdir is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = tmpdir
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
