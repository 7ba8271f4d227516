"""Simulated ranks and their collectives, step by step, counting the bytes each rank sends
(book section :ref:`sec-ring-allreduce`).

A :class:`ProcessGroup` of n ranks lives in one process: a collective takes a list of n
per-rank arrays (rank r's array at index r) and returns the list of n results, moving data the
way NCCL's ring algorithms do, one neighbour-to-neighbour step at a time. Every step adds the
bytes a rank sends to a shared :class:`CommLog`, so a reader can check the textbook volumes per
rank for a buffer of S bytes (nccl-tests ``doc/PERFORMANCE.md``; Thakur et al. 2005):

    all_reduce      2 (n - 1) / n * S    ring reduce-scatter, then ring all-gather
    reduce_scatter  (n - 1) / n * S      S = the full input buffer of each rank
    all_gather      (n - 1) / n * S      S = the full gathered buffer
    all_to_all      (n - 1) / n * S      S = each rank's send buffer, split evenly
    broadcast       S                    a chain from the root (the last rank sends nothing)

Sums are taken in ring order, so they equal the direct sum to float rounding, not bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..checks import check_choice, check_int

__all__ = ["CommLog", "ProcessGroup", "DeviceMesh"]


@dataclass
class CommLog:
    """Bytes sent, per global rank and per collective call, shared by the groups of a mesh.

    Attributes:
        world_size: number of global ranks.
        sent_bytes: (world_size,) float64, total bytes each rank has sent.
        calls: one dict per collective call: ``op``, ``group`` (name), ``ranks`` (global ids) and
            ``bytes_per_rank`` (list, bytes each rank of the group sent in that call).
    """

    world_size: int
    sent_bytes: np.ndarray = field(init=False)
    calls: list = field(default_factory=list)

    def __post_init__(self):
        check_int("world_size", self.world_size, 1)
        self.sent_bytes = np.zeros(self.world_size)

    def bytes_by_op(self) -> dict:
        """{op: bytes sent per rank summed over calls, as a (world_size,) array}."""
        out = {}
        for c in self.calls:
            a = out.setdefault(c["op"], np.zeros(self.world_size))
            a[c["ranks"]] += c["bytes_per_rank"]
        return out

    def reset(self) -> None:
        """Forget every call (e.g. between two phases of a lab)."""
        self.sent_bytes[:] = 0
        self.calls.clear()


class ProcessGroup:
    """n simulated ranks with ring collectives.

    Args:
        size: n, the number of ranks (ignored when ``ranks`` is given).
        ranks: the global ids of the group's ranks (default ``range(size)``).
        log: the :class:`CommLog` to count into (default: a new one for these ranks).
        name: shown in the log (e.g. ``"tp0"``).
    Raises:
        ValueError: ``size`` < 1; ``ranks`` empty, negative, repeated or not below
            ``log.world_size``; or a collective given a list whose length is not n, arrays of
            different shapes or dtypes, or non-numeric arrays (object arrays, such as string labels
            of the chunks, pass through ``reduce_scatter`` and ``all_gather`` only, to show the
            ring's order).
    """

    def __init__(self, size: int | None = None, *, ranks=None, log: CommLog | None = None,
                 name: str = "world"):
        if ranks is None:
            check_int("size", size, 1)
            ranks = range(size)
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise ValueError(f"ranks must be a list of global rank ids, got {ranks!r}")
        ranks = list(ranks)
        for r in ranks:
            check_int("ranks (each global rank id)", r, 0)
        if not ranks or len(set(ranks)) != len(ranks):
            raise ValueError(f"ranks must be a non-empty list of distinct global rank ids, got "
                             f"{ranks!r}")
        self.ranks = [int(r) for r in ranks]
        self.size = len(self.ranks)
        if log is not None and not isinstance(log, CommLog):
            raise ValueError(f"log must be a CommLog or None, got {type(log).__name__}")
        if log is not None and max(self.ranks) >= log.world_size:
            raise ValueError(f"ranks {self.ranks} must be < log.world_size={log.world_size}; "
                             f"pass a CommLog with enough ranks or none")
        self.log = log if log is not None else CommLog(max(self.ranks) + 1)
        self.name = name

    def __repr__(self):
        return f"ProcessGroup({self.name!r}, ranks={self.ranks})"

    # ---- bookkeeping ------------------------------------------------------------------------
    def _check(self, xs, op: str, *, same_shape: bool = True, kinds: str = "iufc",
               labels: bool = False) -> list:
        """The n per-rank arrays of a collective, checked: one per rank, the same shape (when
        ``same_shape``) and one dtype of a numpy kind in ``kinds`` (object arrays, labels, too
        when ``labels``)."""
        if not isinstance(xs, (list, tuple)) or len(xs) != self.size:
            raise ValueError(f"{op} needs a list of {self.size} per-rank arrays (one per rank of "
                             f"{self.name}), got {type(xs).__name__} of length "
                             f"{len(xs) if hasattr(xs, '__len__') else '?'}")
        xs = [np.asarray(x) for x in xs]
        if same_shape and any(x.shape != xs[0].shape for x in xs):
            raise ValueError(f"{op}: every rank's array must have the same shape, got "
                             f"{[x.shape for x in xs]}")
        _check_dtypes(op, xs, kinds, labels)
        return xs

    def _record(self, op: str, sent: np.ndarray) -> None:
        self.log.sent_bytes[self.ranks] += sent
        self.log.calls.append({"op": op, "group": self.name, "ranks": list(self.ranks),
                               "bytes_per_rank": sent.copy()})

    # ---- collectives ------------------------------------------------------------------------
    def reduce_scatter(self, xs: list, _op: str = "reduce_scatter") -> list:
        """Ring reduce-scatter: each rank gives a full (S,) array (any shape, flattened); rank r
        gets chunk r of the sum (``np.array_split`` of the flat sum into n chunks).

        Step s = 0..n-2: rank r sends its running chunk (r - 1 - s) mod n to rank r + 1, which
        adds its own; after n - 1 steps rank r holds chunk r summed over all ranks."""
        xs = self._check(xs, _op, labels=_op == "reduce_scatter")
        n = self.size
        chunks = [list(np.array_split(x.ravel().copy(), n)) for x in xs]   # [rank][chunk]
        sent = np.zeros(n)
        for s in range(n - 1):
            moving = [(r, (r - 1 - s) % n, chunks[r][(r - 1 - s) % n]) for r in range(n)]
            for r, c, buf in moving:                       # all sends of a step happen together
                dst = (r + 1) % n
                chunks[dst][c] = chunks[dst][c] + buf
                sent[r] += buf.nbytes
        self._record(_op, sent)
        return [chunks[r][r] for r in range(n)]

    def all_gather(self, xs: list, _op: str = "all_gather") -> list:
        """Ring all-gather: rank r gives its chunk (any 1-D length, may differ by rank); every
        rank gets the concatenation of all chunks in rank order.

        Step s = 0..n-2: rank r sends chunk (r - s) mod n, the one it received last, to r + 1."""
        xs = self._check(xs, _op, same_shape=False, kinds="biufc", labels=_op == "all_gather")
        n = self.size
        have = [{r: xs[r].ravel()} for r in range(n)]
        sent = np.zeros(n)
        for s in range(n - 1):
            moving = [(r, (r - s) % n, have[r][(r - s) % n]) for r in range(n)]
            for r, c, buf in moving:
                have[(r + 1) % n][c] = buf
                sent[r] += buf.nbytes
        self._record(_op, sent)
        return [np.concatenate([have[r][c] for c in range(n)]) for r in range(n)]

    def all_reduce(self, xs: list) -> list:
        """Ring all-reduce = reduce-scatter then all-gather (2 (n - 1) / n * S bytes per rank);
        returns each rank's copy of the sum, in the input's shape."""
        xs = self._check(xs, "all_reduce")
        shape = xs[0].shape
        if self.size == 1:
            return [xs[0].copy()]
        mark = len(self.log.calls)
        parts = self.reduce_scatter(xs, _op="all_reduce")
        out = self.all_gather(parts, _op="all_reduce")
        rs, ag = self.log.calls[mark:]                     # one record for the whole call
        del self.log.calls[mark:]
        self.log.calls.append({**rs, "bytes_per_rank": rs["bytes_per_rank"] +
                               ag["bytes_per_rank"]})
        return [o.reshape(shape) for o in out]

    def all_to_all(self, xs: list) -> list:
        """``xs[src][dst]`` is the array rank src sends to rank dst; returns ``ys`` with
        ``ys[dst][src] = xs[src][dst]``. A rank's send to itself is a local copy (0 bytes)."""
        n = self.size
        if not isinstance(xs, (list, tuple)) or len(xs) != n or \
                any(not isinstance(row, (list, tuple)) or len(row) != n for row in xs):
            raise ValueError(f"all_to_all needs an {n} x {n} nested list xs[src][dst] of arrays")
        _check_dtypes("all_to_all", [np.asarray(x) for row in xs for x in row], "biufc", False)
        sent = np.array([sum(np.asarray(xs[s][d]).nbytes for d in range(n) if d != s)
                         for s in range(n)], dtype=float)
        self._record("all_to_all", sent)
        return [[np.array(xs[s][d], copy=True) for s in range(n)] for d in range(n)]

    def send(self, x, src: int, dst: int) -> np.ndarray:
        """Point-to-point: group rank ``src`` sends ``x`` to ``dst``; returns dst's copy."""
        for label, r in (("src", src), ("dst", dst)):
            check_int(label, r, 0)
            if r >= self.size:
                raise ValueError(f"{label}={r} is not a rank of {self.name} (size {self.size})")
        x = np.asarray(x)
        sent = np.zeros(self.size)
        sent[src] = x.nbytes if src != dst else 0
        self._record("send", sent)
        return x.copy()

    def broadcast(self, x, root: int = 0) -> list:
        """Chain broadcast from ``root`` (root -> root+1 -> ...): every rank but the last sends
        S bytes once (nccl-tests: bus bandwidth = algorithm bandwidth for broadcast)."""
        check_int("root", root, 0)
        if root >= self.size:
            raise ValueError(f"root={root} is not a rank of {self.name} (size {self.size})")
        x = np.asarray(x)
        sent = np.zeros(self.size)
        for k in range(self.size - 1):
            sent[(root + k) % self.size] = x.nbytes
        self._record("broadcast", sent)
        return [x.copy() for _ in range(self.size)]


def _check_dtypes(op: str, xs: list, kinds: str, labels: bool) -> None:
    """Every array of a collective has one dtype, numeric (numpy kinds ``kinds``), or, when
    ``labels``, object on every rank (string labels of the chunks)."""
    dtypes = sorted({str(x.dtype) for x in xs})
    if len(dtypes) > 1:
        raise ValueError(f"{op}: every rank's array must have the same dtype (a real collective "
                         f"would not upcast), got {dtypes}; cast them to one dtype first")
    kind = xs[0].dtype.kind
    if kind not in kinds and not (labels and kind == "O"):
        allowed = {"iufc": "int, float or complex", "biufc": "bool, int, float or complex"}
        raise ValueError(f"{op}: the arrays must be numeric ({allowed[kinds]}), got dtype "
                         f"{dtypes[0]}")


class DeviceMesh:
    """Global ranks laid out on named axes, the last axis innermost (adjacent ranks), as
    Megatron places tensor parallel innermost: ``DeviceMesh(dp=2, tp=2)`` puts ranks 0, 1 in
    tp group 0 and ranks 0, 2 in dp group 0. All groups count into one :class:`CommLog`.

    Raises:
        ValueError: a degree that is not an int >= 1.
    """

    def __init__(self, **degrees: int):
        if not degrees:
            raise ValueError("DeviceMesh needs at least one axis, e.g. DeviceMesh(dp=2, tp=2)")
        for axis, d in degrees.items():
            check_int(axis, d, 1)
        self.axes = tuple(degrees)
        self.shape = tuple(degrees.values())
        self.size = int(np.prod(self.shape))
        self.log = CommLog(self.size)
        self._ids = np.arange(self.size).reshape(self.shape)

    def rank(self, **coords: int) -> int:
        """Global rank of the given coordinates (every axis must be given)."""
        if set(coords) != set(self.axes):
            raise ValueError(f"rank needs one coordinate per axis {self.axes}, got "
                             f"{tuple(coords)}")
        for a, d in zip(self.axes, self.shape):
            check_int(a, coords[a], 0)
            if coords[a] >= d:
                raise ValueError(f"{a}={coords[a]} is out of range: axis {a!r} has {d} "
                                 f"coordinates, 0..{d - 1}")
        return int(self._ids[tuple(coords[a] for a in self.axes)])

    def _check_rank(self, rank) -> None:
        check_int("rank", rank, 0)
        if rank >= self.size:
            raise ValueError(f"rank={rank} is out of range: the mesh has {self.size} ranks, "
                             f"0..{self.size - 1}")

    def coords(self, rank: int) -> dict:
        """{axis: coordinate} of a global rank."""
        self._check_rank(rank)
        return dict(zip(self.axes, (int(c) for c in np.unravel_index(rank, self.shape))))

    def groups(self, axis: str) -> list:
        """The process groups along ``axis``: one per setting of the other axes."""
        check_choice("axis", axis, self.axes)
        k = self.axes.index(axis)
        ids = np.moveaxis(self._ids, k, -1).reshape(-1, self.shape[k])
        return [ProcessGroup(ranks=row, log=self.log, name=f"{axis}{i}")
                for i, row in enumerate(ids)]

    def group_of(self, axis: str, rank: int) -> ProcessGroup:
        """The group along ``axis`` that holds global ``rank``."""
        self._check_rank(rank)
        return next(g for g in self.groups(axis) if rank in g.ranks)
