"""Verifiable toy tasks: prompts, answer format and the reward function (book section
:ref:`sec-toy-task`)."""
from .addition import AdditionTask

__all__ = ["AdditionTask"]
