"""Verifiable toy tasks: prompts, answer format and the reward function (book section 1.2)."""
from .addition import AdditionTask

__all__ = ["AdditionTask"]
