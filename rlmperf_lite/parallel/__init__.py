"""Parallelism executed exactly on simulated ranks in one process (book Part III, Chapters 7-9):
collectives that count the bytes they move, data parallelism and ZeRO, tensor, sequence, context,
pipeline and expert parallelism, each equal to the unsharded computation."""
from .collectives import CommLog, DeviceMesh, ProcessGroup

__all__ = ["CommLog", "DeviceMesh", "ProcessGroup"]
