"""One inference replica under continuous batching, as the simulators see it (book section
:ref:`sec-simulator`).

Every running sequence gains one token per iteration and an iteration over n sequences takes
:meth:`Engine.iteration_s(n) <rlmperf_lite.sim.Engine.iteration_s>`, so all running sequences
advance on a shared token clock tau: d tau / dt = 1 / iteration_s(n). A sequence of R tokens
started at clock tau0 ends when the clock reaches tau0 + R; the next end is the smallest such
target, reached after (target - tau) iteration_s(n) seconds if nothing changes before. Waiting
sequences take free slots first come, first served. A paused replica (weight sync) keeps its
sequences and its clock stops.
"""
from __future__ import annotations

import heapq
from collections import deque

from .system import Engine

__all__ = ["Replica"]


class Replica:
    """Token clock, running sequences and FIFO queue of one replica."""

    def __init__(self, engine: Engine, start_s: float = 0.0):
        self.engine = engine
        self.tau = 0.0                  # tokens every sequence running since t=0 would have
        self.updated_s = start_s
        self.running: list = []         # heap of (target tau, sample)
        self.queue: deque = deque()     # (sample, tokens) waiting for a slot
        self.paused = False
        self.epoch = 0                  # bumped at every change: stale end events are dropped

    def advance(self, t: float) -> None:
        """Move the clock to time ``t``."""
        if self.running and not self.paused:
            self.tau += (t - self.updated_s) / float(self.engine.iteration_s(len(self.running)))
        self.updated_s = t

    def fill(self, t: float) -> list:
        """Start queued sequences on free slots at ``t``; returns the samples started."""
        started = []
        if self.paused:
            return started
        self.advance(t)
        while self.queue and len(self.running) < self.engine.slots:
            j, tokens = self.queue.popleft()
            heapq.heappush(self.running, (self.tau + tokens, j))
            started.append(j)
        if started:
            self.epoch += 1
        return started

    def next_end_s(self) -> float | None:
        """When the next running sequence ends if nothing changes (None: none, or paused)."""
        if not self.running or self.paused:
            return None
        target = self.running[0][0]
        return self.updated_s + max(target - self.tau, 0.0) * float(
            self.engine.iteration_s(len(self.running)))

    def pop_end(self, t: float) -> int:
        """The sequence ending at ``t`` (the one with the smallest target) leaves its slot."""
        self.advance(t)
        _, j = heapq.heappop(self.running)
        self.epoch += 1
        return j

    def pause(self, t: float) -> None:
        self.advance(t)
        self.paused = True
        self.epoch += 1

    def resume(self, t: float) -> None:
        self.updated_s = t
        self.paused = False
        self.epoch += 1

    def run_alone(self, samples, tokens) -> tuple[dict, dict]:
        """Run ``samples`` (queued in order, ``tokens`` each) to completion with no other
        event; returns ({sample: start_s}, {sample: end_s})."""
        self.queue.extend(zip(samples, tokens))
        start, end = {}, {}
        t = self.updated_s
        while True:
            for j in self.fill(t):
                start[j] = t
            t_next = self.next_end_s()
            if t_next is None:
                return start, end
            t = t_next
            end[self.pop_end(t)] = t
