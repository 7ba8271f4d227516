"""Accelerators: peak FLOP/s, memory and bandwidths, with sources, and a preset measured on the
reader's own CPU (book sections :ref:`sec-roofline` and :ref:`sec-phase-profile`).

All figures are per device. FLOP/s are *dense* peaks (vendors often print "with sparsity",
twice the dense figure); ``fp32`` is the vendor's FP32 figure, non-tensor-core for NVIDIA, the
matrix-core one for AMD's MI300X. Link bandwidths are per GPU in one direction (NVLink's
"900 GB/s" for H100 is the two directions added). ``hbm_bytes`` takes the vendor's "80GB" as
80e9 bytes. The NVLink bandwidth joins the GPUs of one NVLink domain — a node of 8 for HGX
boards, a 72-GPU rack for GB200 NVL72 (``nvlink_domain_gpus``) — and the network the rest.
Sources: each preset's ``sources`` field, from the vendors' datasheets.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from ..checks import check_int, check_number, did_you_mean

__all__ = ["HardwareSpec", "hardware_preset", "hardware_presets", "measure_cpu"]

_ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "a100-40": "a100-40gb",
            "a100-80": "a100-80gb", "h200-sxm": "h200", "mi300": "mi300x", "gb200": "gb200-nvl72",
            "nvl72": "gb200-nvl72"}


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator (or the measured CPU).

    Attributes:
        peak_flops: {dtype: dense peak FLOP/s}, dtypes among fp64, fp32, tf32, bf16, fp16, fp8,
            fp4.
        hbm_bytes, hbm_bandwidth_bytes_per_s: device memory and its bandwidth.
        intra_node_bandwidth_bytes_per_s, inter_node_bandwidth_bytes_per_s: per GPU, one
            direction (NVLink / Infinity Fabric within the NVLink domain; the network card per
            GPU beyond it).
        gpus_per_node: devices per node (server, or compute tray of a rack).
        host_link_bandwidth_bytes_per_s: GPU <-> host memory (PCIe), one direction, peak; None =
            unknown (offload and sleep/wake costs then refuse, see
            :func:`rlmperf_lite.cost.switch_time_s`).
        sources: {field: where the value comes from}.
        nvlink_domain_gpus: devices joined by NVLink (NVSwitch) at the intra-node bandwidth, a
            multiple of gpus_per_node (72 for a GB200 NVL72 rack of 4-GPU trays); None: one
            node. Read it through :attr:`nvlink_domain`.
    """

    name: str
    peak_flops: dict
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    intra_node_bandwidth_bytes_per_s: float | None = None
    inter_node_bandwidth_bytes_per_s: float | None = None
    gpus_per_node: int = 1
    sources: dict = field(default_factory=dict, compare=False)
    host_link_bandwidth_bytes_per_s: float | None = None
    nvlink_domain_gpus: int | None = None

    def __post_init__(self):
        if not isinstance(self.peak_flops, dict) or not self.peak_flops:
            raise ValueError(f"HardwareSpec.peak_flops must be a non-empty dict dtype -> FLOP/s, "
                             f"got {self.peak_flops!r}")
        for dtype, v in self.peak_flops.items():
            check_number(f"HardwareSpec.peak_flops[{dtype!r}]", v, low=0, low_open=True)
        check_number("HardwareSpec.hbm_bandwidth_bytes_per_s", self.hbm_bandwidth_bytes_per_s,
                     low=0, low_open=True)
        check_number("HardwareSpec.hbm_bytes", self.hbm_bytes, low=0, low_open=True)
        for f in ("intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s",
                  "host_link_bandwidth_bytes_per_s"):
            if getattr(self, f) is not None:
                check_number(f"HardwareSpec.{f}", getattr(self, f), low=0, low_open=True)
        check_int("HardwareSpec.gpus_per_node", self.gpus_per_node, 1)
        check_int("HardwareSpec.nvlink_domain_gpus", self.nvlink_domain_gpus, 1, optional=True)
        if self.nvlink_domain_gpus is not None and self.nvlink_domain_gpus % self.gpus_per_node:
            raise ValueError(f"HardwareSpec.nvlink_domain_gpus={self.nvlink_domain_gpus} must be "
                             f"a multiple of gpus_per_node={self.gpus_per_node} (a domain holds "
                             f"whole nodes); use None for one node")

    @property
    def nvlink_domain(self) -> int:
        """The GPUs that reach each other over NVLink, ``nvlink_domain_gpus`` or else one node's."""
        return self.nvlink_domain_gpus or self.gpus_per_node

    def group_bandwidth(self, gpus: int) -> float:
        """The bus bandwidth of a ring over ``gpus`` consecutive GPUs, in bytes/s per direction:
        NVLink within the NVLink domain (:attr:`nvlink_domain`), else the network card's (as
        ``train_step_time`` places a dp group).

        Raises:
            ValueError: when the link the group needs is not known.
        """
        bw = self.intra_node_bandwidth_bytes_per_s if gpus <= self.nvlink_domain else \
            self.inter_node_bandwidth_bytes_per_s
        if bw is None:
            raise ValueError(f"hardware {self.name!r} has no link bandwidths; use a GPU preset "
                             f"such as 'h100'")
        return float(bw)

    def tp_bandwidth(self, bandwidth_bytes_per_s=None) -> float:
        """The bus bandwidth a tensor-parallel group's collectives get, in bytes/s per
        direction: ``bandwidth_bytes_per_s`` if given, else the intra-node (NVLink) figure.

        Raises:
            ValueError: naming ``bandwidth_bytes_per_s`` (not positive), or when neither is
                known.
        """
        bw = self.intra_node_bandwidth_bytes_per_s if bandwidth_bytes_per_s is None \
            else bandwidth_bytes_per_s
        if bw is None:
            raise ValueError(f"hardware {self.name!r} has no intra-node bandwidth; pass "
                             f"bandwidth_bytes_per_s or use a GPU preset such as 'h100'")
        check_number("bandwidth_bytes_per_s", bw, low=0, low_open=True)
        return float(bw)

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype``.

        Raises:
            ValueError: the device has no figure for that dtype (e.g. fp8 on A100).
        """
        if not isinstance(dtype, str) or dtype not in self.peak_flops:
            raise ValueError(f"{self.name} has no peak for dtype {dtype!r}; it has "
                             f"{sorted(self.peak_flops)}")
        return float(self.peak_flops[dtype])

    @property
    def ridge_intensity(self) -> float:
        """bf16 (else fp32) peak / memory bandwidth — the arithmetic intensity (FLOPs per byte)
        above which a kernel is compute-bound on the roofline."""
        dtype = "bf16" if "bf16" in self.peak_flops else "fp32"
        return self.peak(dtype) / self.hbm_bandwidth_bytes_per_s


@lru_cache(maxsize=None)
def _table() -> dict:
    path = resources.files("rlmperf_lite.cost") / "data" / "hardware.json"
    return json.loads(path.read_text(encoding="utf-8"))


def hardware_presets() -> list[str]:
    """Names of the shipped accelerator presets."""
    return sorted(_table())


def resolve_hardware(hardware, label: str = "hardware") -> HardwareSpec:
    """``hardware`` as a HardwareSpec: itself, or the preset it names (:func:`hardware_preset`).

    Raises:
        ValueError: naming ``label`` when ``hardware`` is neither; an unknown preset name.
    """
    hw = hardware_preset(hardware) if isinstance(hardware, str) else hardware
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"{label} must be a HardwareSpec or a preset name, got {hardware!r}")
    return hw


def hardware_preset(name: str) -> HardwareSpec:
    """A shipped accelerator by name (case-insensitive; "h100" = "h100-sxm", "a100" =
    "a100-80gb", "nvl72" = "gb200" = "gb200-nvl72", a 72-GPU NVLink domain).

    Raises:
        ValueError: an unknown name, with the closest known ones ("did you mean") and the
            list of all.
    """
    if not isinstance(name, str):
        raise ValueError(f"hardware preset name must be a string, got {name!r}")
    key = _ALIASES.get(name.lower(), name.lower())
    table = _table()
    if key not in table:
        close = did_you_mean(name, [*table, *_ALIASES])
        raise ValueError(f"unknown hardware preset {name!r}{close}; known: "
                         f"{', '.join(sorted(table))} (aliases: {', '.join(sorted(_ALIASES))})")
    d = table[key]
    return HardwareSpec(name=d["name"], peak_flops=dict(d["peak_flops"]),
                        hbm_bytes=float(d["hbm_bytes"]),
                        hbm_bandwidth_bytes_per_s=float(d["hbm_bandwidth_bytes_per_s"]),
                        intra_node_bandwidth_bytes_per_s=d["intra_node_bandwidth_bytes_per_s"],
                        inter_node_bandwidth_bytes_per_s=d["inter_node_bandwidth_bytes_per_s"],
                        gpus_per_node=d["gpus_per_node"], sources=d["sources"],
                        host_link_bandwidth_bytes_per_s=d.get("host_link_bandwidth_bytes_per_s"),
                        nvlink_domain_gpus=d.get("nvlink_domain_gpus"))


def _best_rate(fn, work: float, seconds: float) -> float:
    """Largest work / time over repeated calls of ``fn`` within about ``seconds``."""
    best, end = 0.0, time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        fn()
        best = max(best, work / (time.perf_counter() - t))
        if time.perf_counter() > end:
            return best


def measure_cpu(seconds: float = 1.0, *, matrix_size: int = 512,
                array_bytes: int = 64 * 2**20) -> HardwareSpec:
    """Measure this machine: float32 and float64 GEMM FLOP/s (numpy's BLAS, with the threads it
    uses by default) and memory bandwidth (copying an ``array_bytes`` array: bytes read plus
    bytes written, per second), best of repeated runs within about ``seconds`` in total.

    The result is a lower bound on the CPU's peak (numpy's BLAS, not a tuned kernel), which is
    what the book's toy model can reach. ``hbm_bytes`` is the physical RAM.

    Raises:
        ValueError: ``seconds`` outside (0, 60], ``matrix_size`` outside [64, 4096],
            ``array_bytes`` outside [1 MiB, 1 GiB].
    """
    check_number("seconds", seconds, low=0, high=60, low_open=True)
    check_int("matrix_size", matrix_size, 64)
    check_int("array_bytes", array_bytes, 2**20)
    if matrix_size > 4096 or array_bytes > 2**30:
        raise ValueError(f"matrix_size must be <= 4096 and array_bytes <= 1 GiB (a measurement "
                         f"of a second or two), got {matrix_size} and {array_bytes}")
    rng = np.random.default_rng(0)
    n, flops = matrix_size, {}
    for dtype, key in ((np.float32, "fp32"), (np.float64, "fp64")):
        a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
        flops[key] = _best_rate(lambda a=a, b=b: a @ b, 2.0 * n ** 3, seconds / 3)
    src = np.ones(array_bytes // 8)
    dst = np.empty_like(src)
    bandwidth = _best_rate(lambda: np.copyto(dst, src), 2.0 * src.nbytes, seconds / 3)
    try:
        ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):      # not a POSIX system: RAM unknown,
        ram = 1.0                                      # recorded as 1 byte (see sources)
    how = f"measured by rlmperf_lite.cost.measure_cpu in {seconds:g} s"
    return HardwareSpec(name="this CPU (measured)", peak_flops=flops, hbm_bytes=ram,
                        hbm_bandwidth_bytes_per_s=bandwidth, gpus_per_node=1,
                        sources={"peak_flops": how, "hbm_bandwidth_bytes_per_s": how,
                                 "hbm_bytes": "os.sysconf physical pages"})
