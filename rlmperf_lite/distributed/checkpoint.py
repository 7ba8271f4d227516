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

from ..nn import TinyLMConfig, copy_params

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


def _where(directory) -> str:
    return f"resume_from={str(directory)!r}"


def _load_npz(path: Path, directory) -> dict:
    """The arrays of one ``.npz`` file of a checkpoint, all finite.

    Raises:
        ValueError: naming ``resume_from`` and the file, when it is missing, unreadable or
            holds NaN or inf.
    """
    if not path.is_file():
        raise ValueError(f"{_where(directory)} lacks {path.name}; the checkpoint is incomplete, "
                         f"pass a directory written whole by save_checkpoint")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k].copy() for k in f.files}
    except Exception as err:          # zip, pickle and header errors all mean a damaged file
        raise ValueError(f"{_where(directory)}: {path.name} is not a readable .npz file "
                         f"({type(err).__name__}: {err}); save the checkpoint again") from None
    for key, a in arrays.items():
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise ValueError(f"{_where(directory)}: {path.name}[{key!r}] has dtype {a.dtype}, "
                             f"not numbers")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{_where(directory)}: {path.name}[{key!r}] has non-finite values "
                             f"(NaN or inf); resume from an earlier checkpoint")
    return arrays


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


_STATE_KEYS = {"step": int, "adam_t": int, "weight_versions": list, "rng_data_state": dict,
               "rollout_rng_states": list, "meta": dict}
"""The keys of ``state.json`` after ``format``, and the JSON type of each."""


def _read_state(path: Path, directory) -> dict:
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{_where(directory)}: state.json is not valid JSON ({err}); the "
                         f"checkpoint is damaged, save it again or resume from another") from None
    if not isinstance(state, dict):
        raise ValueError(f"{_where(directory)}: state.json holds a {type(state).__name__}, not "
                         f"the object save_checkpoint writes")
    if state.get("format") != FORMAT:
        raise ValueError(f"{_where(directory)} has checkpoint format "
                         f"{state.get('format')!r}, this library reads {FORMAT}")
    for key, kind in _STATE_KEYS.items():
        if key not in state:
            raise ValueError(f"{_where(directory)}: state.json lacks {key!r}; pass a checkpoint "
                             f"written whole by save_checkpoint")
        value = state[key]
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise ValueError(f"{_where(directory)}: state.json[{key!r}] must be "
                             f"{'an int >= 0' if kind is int else 'a JSON ' + kind.__name__}, "
                             f"got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
               for v in state["weight_versions"]):
        raise ValueError(f"{_where(directory)}: state.json['weight_versions'] must list ints "
                         f">= 0, got {state['weight_versions']!r}")
    if not all(isinstance(s, dict) for s in state["rollout_rng_states"]):
        raise ValueError(f"{_where(directory)}: state.json['rollout_rng_states'] must list one "
                         f"bit_generator state (a JSON object) per rollout worker")
    return state


def load_checkpoint(directory, model=None) -> Checkpoint:
    """Read a directory written by :func:`~rlmperf_lite.distributed.save_checkpoint`, checking
    that it is whole: a ``state.json`` of this format with every key, and every ``.npz`` file
    (``params``, ``adam_m``, ``adam_v``, ``base_params``, ``weights_vN`` of each saved version)
    present with finite arrays. With ``model`` (a :class:`~rlmperf_lite.nn.TinyLMConfig`),
    the weights, both AdamW moments and every weight version must also have exactly the
    model's weights and shapes (:func:`~rlmperf_lite.nn.copy_params`), and ``adam_v`` no
    negative entries.

    Raises:
        ValueError: naming ``resume_from`` (the Controller's parameter) when ``directory`` is
            not a str or path, the directory or its ``state.json`` is missing, ``state.json``
            is not JSON, of another format or lacks a key, an ``.npz`` file is missing,
            unreadable or holds NaN or inf, or (with ``model``) an array set does not match
            the model; naming ``model`` when it is not a TinyLMConfig.
    """
    if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
        raise ValueError(f"resume_from must be a checkpoint directory (a str or path), got "
                         f"{type(directory).__name__} {directory!r}")
    if model is not None and not isinstance(model, TinyLMConfig):
        raise ValueError(f"model must be None or a TinyLMConfig (the run's config.model), "
                         f"got {type(model).__name__}")
    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"{_where(directory)} does not exist or is not a directory; pass one "
                         f"written with checkpoint_dir")
    if not (path / "state.json").is_file():
        raise ValueError(f"{_where(directory)} is not a checkpoint directory "
                         f"(no state.json); pass one written with checkpoint_dir")
    state = _read_state(path, directory)
    arrays = {name: _load_npz(path / f"{name}.npz", directory)
              for name in ("params", "adam_m", "adam_v", "base_params")}
    versions = {v: _load_npz(path / f"weights_v{v}.npz", directory)
                for v in state["weight_versions"]}
    if model is not None:
        for name, a in [*arrays.items(), *((f"weights_v{v}", w) for v, w in versions.items())]:
            copy_params(a, model, f"{_where(directory)}: {name}.npz")   # keys, shapes
        for key, a in arrays["adam_v"].items():
            if np.any(a < 0):
                raise ValueError(f"{_where(directory)}: adam_v.npz[{key!r}] has negative "
                                 f"values; AdamW's second moment is a mean of squares")
    return Checkpoint(step=state["step"], params=arrays["params"], adam_m=arrays["adam_m"],
                      adam_v=arrays["adam_v"], adam_t=state["adam_t"],
                      base_params=arrays["base_params"], weight_versions=versions,
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
