"""rlmperf_lite: the library of the book RLM Performance Foundations.

Subpackages: ``nn`` (the tiny numpy LM), ``tasks`` (verifiable toy tasks), ``rl`` (advantages,
losses, GRPO), ``workdepth`` (the work-depth calculator), ``views`` (charts and widgets; needs
altair and ipywidgets), ``cli`` (the ``rlmperf`` command).
"""
from . import nn, rl, tasks, workdepth

__all__ = ["nn", "rl", "tasks", "workdepth"]
