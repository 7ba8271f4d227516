"""Accelerator presets (vendor figures with sources) and the CPU measured on this machine."""
import pytest

from rlmperf_lite.cost import HardwareSpec, hardware_preset, hardware_presets, measure_cpu

FIELDS = ("peak_flops", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
          "intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s")


@pytest.mark.parametrize("name", hardware_presets())
def test_every_preset_value_has_a_source(name):
    hw = hardware_preset(name)
    assert set(FIELDS) <= set(hw.sources), sorted(set(FIELDS) - set(hw.sources))
    # every shipped node holds 8 GPUs but the NVL72 rack's 4-GPU compute trays, 18 of which
    # share one 72-GPU NVLink domain
    assert hw.gpus_per_node == (4 if name == "gb200-nvl72" else 8)
    assert hw.nvlink_domain == (72 if name == "gb200-nvl72" else hw.gpus_per_node)
    if hw.nvlink_domain_gpus is not None:
        assert "nvlink_domain_gpus" in hw.sources
    assert hw.peak("bf16") > hw.peak("fp32") > 0


def test_published_values():
    """NVIDIA H100 SXM datasheet: BF16 1,979 TFLOP/s *with sparsity* (dense = half), 80 GB HBM3
    at 3.35 TB/s, NVLink 900 GB/s (both directions); A100 datasheet: BF16 312 TFLOP/s dense,
    no FP8; AMD MI300X (ROCm docs): BF16 1,307.4 TFLOP/s dense, 192 GB at 5.3 TB/s."""
    h100 = hardware_preset("h100")
    assert h100.peak("bf16") == 1979e12 / 2
    assert (h100.hbm_bytes, h100.hbm_bandwidth_bytes_per_s) == (80e9, 3.35e12)
    assert h100.intra_node_bandwidth_bytes_per_s == 900e9 / 2
    assert hardware_preset("A100").peak("bf16") == 312e12
    with pytest.raises(ValueError, match="has no peak for dtype 'fp8'"):
        hardware_preset("a100-80gb").peak("fp8")
    mi = hardware_preset("mi300x")
    assert (mi.peak("bf16"), mi.hbm_bytes, mi.hbm_bandwidth_bytes_per_s) == (1307.4e12, 192e9,
                                                                             5.3e12)
    assert h100.ridge_intensity == pytest.approx(989.5e12 / 3.35e12)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown hardware preset 'tpu'.*h100-sxm"):
        hardware_preset("tpu")


def test_measured_cpu_is_positive_and_bad_arguments_are_named():
    cpu = measure_cpu(0.3)
    assert isinstance(cpu, HardwareSpec)
    assert cpu.peak("fp32") > 1e8 and cpu.hbm_bandwidth_bytes_per_s > 1e8
    for kw, match in (({"seconds": 0}, "seconds"), ({"matrix_size": 8}, "matrix_size"),
                      ({"array_bytes": 10}, "array_bytes")):
        with pytest.raises(ValueError, match=match):
            measure_cpu(**kw)
