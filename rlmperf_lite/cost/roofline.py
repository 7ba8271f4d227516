"""Time of a phase on a device: the roofline, decode's bytes, and MFU (book section
:ref:`sec-roofline`).

A kernel that performs F FLOPs and moves Q bytes to and from device memory takes at least

    t = max(F / peak_flops, Q / memory_bandwidth)                     (Williams et al. 2009)

It is compute-bound when its arithmetic intensity F / Q exceeds the device's ridge point
peak / bandwidth (about 295 FLOPs per byte for H100 in bf16), memory-bound below. Prefill and
training multiply every weight by thousands of tokens at once: far above the ridge. A decode
step multiplies every weight by one token per sequence in the batch, and reads each sequence's
KV cache: with a small batch it sits far below the ridge and its time is the time to read the
weights and the cache.

Model FLOPs utilisation (Chowdhery et al. 2022, PaLM, Appendix B): the FLOPs the model needs
(not counting recomputation) per second achieved, divided by the devices' peak.
"""
from __future__ import annotations

from ..checks import check_int, check_number
from .flops import attended_keys, attention_flops_per_pair, check_model, matmul_weights_per_token
from .hardware import HardwareSpec
from .memory import kv_cache_bytes
from .model import ModelConfig

__all__ = ["roofline_time", "decode_step_bytes", "decode_step_flops", "mfu",
           "params_read_per_step"]


def _hw(hardware) -> HardwareSpec:
    if not isinstance(hardware, HardwareSpec):
        raise ValueError(f"hardware must be a HardwareSpec (e.g. hardware_preset('h100')), got "
                         f"{type(hardware).__name__}")
    return hardware


def roofline_time(flops: float, bytes_moved: float, hardware: HardwareSpec, *,
                  dtype: str = "bf16", num_devices: int = 1) -> dict:
    """Roofline time of a kernel (or a phase) spread evenly over ``num_devices``.

    Returns:
        dict: ``time_s`` = max(compute_s, memory_s), ``compute_s``, ``memory_s``,
        ``intensity`` (FLOPs per byte), ``ridge`` (the device's peak / bandwidth) and ``bound``
        (``"compute"`` or ``"memory"``).
    Raises:
        ValueError: negative FLOPs or bytes, a bad device count, a dtype the device lacks.
    """
    hw = _hw(hardware)
    check_number("flops", flops, low=0)
    check_number("bytes_moved", bytes_moved, low=0)
    check_int("num_devices", num_devices, 1)
    peak = hw.peak(dtype)
    compute_s = flops / (peak * num_devices)
    memory_s = bytes_moved / (hw.hbm_bandwidth_bytes_per_s * num_devices)
    ridge = peak / hw.hbm_bandwidth_bytes_per_s
    intensity = flops / bytes_moved if bytes_moved else float("inf")
    return {"time_s": max(compute_s, memory_s), "compute_s": compute_s, "memory_s": memory_s,
            "intensity": intensity, "ridge": ridge,
            "bound": "compute" if intensity >= ridge else "memory"}


def decode_step_flops(model: ModelConfig, batch: int, context: int) -> float:
    """FLOPs of one decode step for ``batch`` sequences whose caches hold ``context`` tokens:
    per sequence 2 x the matrix weights + attention over the context and the new token itself
    (context + 1 keys, as in ``decode_flops``; a sliding-window layer
    min(context + 1, W) of them, ``attended_keys``).

    Raises:
        ValueError: a non-ModelConfig model, ``batch`` < 1 or ``context`` < 0."""
    m = check_model(model)
    check_int("batch", batch, 1)
    check_int("context", context, 0)
    return float(batch * (2 * matmul_weights_per_token(m)
                          + attention_flops_per_pair(m) * attended_keys(m, context + 1)))


def params_read_per_step(model: ModelConfig, batch):
    """Parameters a decode step over ``batch`` sequences reads (an int, or an array of batch
    sizes): all of them for a dense model; for MoE, the routed experts a batch of that size is
    expected to touch — each of E experts is picked by a token with probability k / E, so
    E (1 - (1 - k/E)^batch) of them — plus everything else."""
    m = model
    if not m.is_moe:
        return m.num_params() + 0 * batch
    routed = m.param_breakdown()["routed_experts"]
    k, E = m.num_experts_per_tok, m.num_experts
    return m.num_params() - routed + routed * (1 - (1 - k / E) ** batch)


def decode_step_bytes(model: ModelConfig, batch: int, context: int, *, weight_bytes: int = 2,
                      kv_dtype_bytes: int = 2) -> float:
    """Bytes one decode step reads from device memory: every weight once (for MoE, the experts
    a batch of that size is expected to touch,
    :func:`~rlmperf_lite.cost.roofline.params_read_per_step`), plus each sequence's KV cache of
    ``context`` tokens (a sliding-window layer's last W of them,
    ``kv_cache_bytes``). Activations are small next to both and
    left out.

    Raises:
        ValueError: naming a bad model, batch, context, weight_bytes or kv_dtype_bytes."""
    m = check_model(model)
    check_int("batch", batch, 1)
    check_int("context", context, 0)
    check_int("weight_bytes", weight_bytes, 1)
    check_int("kv_dtype_bytes", kv_dtype_bytes, 1)
    params = params_read_per_step(m, batch)
    kv = batch * kv_cache_bytes(m, context, kv_dtype_bytes)
    return float(params * weight_bytes + kv)


def mfu(model_flops: float, seconds: float, hardware: HardwareSpec, *, num_devices: int = 1,
        dtype: str = "bf16") -> float:
    """Model FLOPs utilisation: ``model_flops`` (the FLOPs the model needs, recomputation
    excluded) / (``seconds`` x ``num_devices`` x the device's peak for ``dtype``), in [0, 1].

    Raises:
        ValueError: negative FLOPs, non-positive seconds, a bad device count or dtype, or
            inputs that give more than 100% (the FLOPs could not have run in that time)."""
    hw = _hw(hardware)
    check_number("model_flops", model_flops, low=0)
    check_number("seconds", seconds, low=0, low_open=True)
    check_int("num_devices", num_devices, 1)
    u = model_flops / (seconds * num_devices * hw.peak(dtype))
    if u > 1:
        raise ValueError(f"model_flops={model_flops:.3g} in {seconds:.3g} s on {num_devices} x "
                         f"{hw.name} is {u:.3g}x the peak: check the units (FLOPs, seconds)")
    return u
