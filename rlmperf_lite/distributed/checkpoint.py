"""Checkpoint and resume of the toy RL system: everything the next step depends on, in a
directory of ``.npz`` arrays and one ``state.json`` (book chapter "A mini RL system on Ray").

The next step of a GRPO run depends on more than the weights: the AdamW moments and step count
(the bias correction), the reference model, the prompt stream and every rollout worker's
sampling stream, and, with staleness k, the k older weight versions the rollout workers will
still sample with. With all of them saved, a resumed run takes exactly the step the
uninterrupted run would have taken. Directories are written under a temporary name and renamed
when complete, so a crash while saving never leaves a half checkpoint behind.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "check_resume"]

FORMAT = 1


@dataclass
class Checkpoint:
    """The state of a run between two steps."""

    step: int
    """The next step to run (steps done so far)."""
    params: dict
    """Learner weights (all learners hold the same)."""
    adam_m: dict
    adam_v: dict
    adam_t: int
    """AdamW's first and second moments and update count."""
    base_params: dict
    """The reference (warm-start) model."""
    weight_versions: dict
    """The weights, by version, that the rollout workers will still sample with (staleness
    k > 0)."""
    rng_data_state: dict
    """The prompt stream's ``bit_generator.state`` before the next step's prompts."""
    rollout_rng_states: list
    """Each rollout worker's sampling-stream state before the next step."""
    meta: dict
    """Run settings (mode, workers, staleness, the config as a dict) to check a resume against."""


def _save_npz(path: Path, arrays: dict) -> None:
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})


def _load_npz(path: Path) -> dict:
    with np.load(path) as f:
        return {k: f[k].copy() for k in f.files}


def save_checkpoint(directory, ckpt: Checkpoint) -> str:
    """Write ``ckpt`` to ``directory`` (created; replaced if it exists). Returns its path.

    Raises:
        ValueError: ``ckpt`` not a Checkpoint.
    """
    if not isinstance(ckpt, Checkpoint):
        raise ValueError(f"ckpt must be a Checkpoint, got {type(ckpt).__name__}")
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _save_npz(tmp / "params.npz", ckpt.params)
    _save_npz(tmp / "adam_m.npz", ckpt.adam_m)
    _save_npz(tmp / "adam_v.npz", ckpt.adam_v)
    _save_npz(tmp / "base_params.npz", ckpt.base_params)
    for v, weights in ckpt.weight_versions.items():
        _save_npz(tmp / f"weights_v{int(v)}.npz", weights)
    state = {"format": FORMAT, "step": int(ckpt.step), "adam_t": int(ckpt.adam_t),
             "weight_versions": sorted(int(v) for v in ckpt.weight_versions),
             "rng_data_state": ckpt.rng_data_state,
             "rollout_rng_states": list(ckpt.rollout_rng_states), "meta": ckpt.meta}
    (tmp / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return str(final)


def load_checkpoint(directory) -> Checkpoint:
    """Read a directory written by :func:`~rlmperf_lite.distributed.save_checkpoint`.

    Raises:
        ValueError: naming ``resume_from`` when the directory or its ``state.json`` is missing
            or of another format.
    """
    path = Path(directory)
    if not (path / "state.json").is_file():
        raise ValueError(f"resume_from={str(directory)!r} is not a checkpoint directory "
                         f"(no state.json); pass one written with checkpoint_dir")
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    if state.get("format") != FORMAT:
        raise ValueError(f"resume_from={str(directory)!r} has checkpoint format "
                         f"{state.get('format')!r}, this library reads {FORMAT}")
    return Checkpoint(step=state["step"], params=_load_npz(path / "params.npz"),
                      adam_m=_load_npz(path / "adam_m.npz"), adam_v=_load_npz(path / "adam_v.npz"),
                      adam_t=state["adam_t"], base_params=_load_npz(path / "base_params.npz"),
                      weight_versions={v: _load_npz(path / f"weights_v{v}.npz")
                                       for v in state["weight_versions"]},
                      rng_data_state=state["rng_data_state"],
                      rollout_rng_states=state["rollout_rng_states"], meta=state["meta"])


def check_resume(ckpt: Checkpoint, meta: dict, where) -> None:
    """Raise unless the run described by ``meta`` (keys mode, num_rollout_workers, staleness,
    config) may continue ``ckpt``: the same rollout workers (their streams), staleness (the
    saved weight versions) and config, except ``steps`` and ``mode``.

    Raises:
        ValueError: naming ``resume_from`` and what differs.
    """
    saved, now = dict(ckpt.meta), dict(meta)
    saved_cfg, now_cfg = dict(saved.pop("config", {})), dict(now.pop("config", {}))
    for d in (saved, now, saved_cfg, now_cfg):
        d.pop("mode", None), d.pop("steps", None)
    if saved != now or saved_cfg != now_cfg:
        diff = sorted(k for k in {**saved_cfg, **now_cfg} if saved_cfg.get(k) != now_cfg.get(k))
        raise ValueError(f"resume_from={str(where)!r} was saved by another run (workers and "
                         f"staleness {saved} vs {now}; config fields that differ: {diff})")
