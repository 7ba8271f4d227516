"""Pipeline bubble against Narayanan et al. 2021 (Megatron-LM, arXiv 2104.04473) §2.2."""
import pytest

from rlmperf_lite.cost import pipeline_bubble_fraction


def test_bubble_p8_m32():
    """§2.2.1: (p - 1) / m of the ideal time; p = 8, m = 32 -> 7/32 = 0.21875."""
    assert pipeline_bubble_fraction(8, 32) == 0.21875


def test_interleaved_bubble_v2():
    """§2.2.2: interleaving v chunks per stage divides the bubble by v: 0.109375."""
    assert pipeline_bubble_fraction(8, 32, interleave=2) == 0.109375


def test_share_of_total_time():
    """(p - 1) / (m + p - 1) of the whole step: 7 / 39."""
    assert pipeline_bubble_fraction(8, 32, of="total") == pytest.approx(7 / 39)
    assert pipeline_bubble_fraction(1, 5) == 0.0


def test_interleaving_rules():
    """Megatron-LM's interleaved schedule needs m divisible by p, and a pipeline."""
    with pytest.raises(ValueError, match="microbatches divisible by pp"):
        pipeline_bubble_fraction(8, 12, interleave=2)
    with pytest.raises(ValueError, match="needs pp > 1"):
        pipeline_bubble_fraction(1, 4, interleave=2)
    with pytest.raises(ValueError, match="of"):
        pipeline_bubble_fraction(8, 32, of="bubble")
