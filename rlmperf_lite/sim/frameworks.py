"""RL frameworks on the simulator's knobs (book sections :ref:`sec-framework-facts` and
:ref:`sec-framework-presets`): each framework's checked facts and its presets, read from one
JSON file per framework under ``rlmperf_lite/sim/data/frameworks/``, and the builder of a
preset as a ready :class:`~rlmperf_lite.sim.RLSystem`.

- :data:`FRAMEWORKS`: name -> :class:`FrameworkFacts`, each fact with its source (repository
  file + commit read, or paper + part read) and the version the row describes (``as_of``);
  "unconfirmed" marks what no primary source said.
- :data:`PRESETS`: preset name -> :class:`FrameworkPreset`, a default layout or a named variant
  (``"verl-fully-async"``) on the simulator's pools, placement, mode and staleness.
- :func:`framework_system`: a preset for a model, accelerator, GPU count and workload, with the
  costs of :func:`~rlmperf_lite.sim.from_cost.system_from_cost` (vLLM-like engine; the weight
  sync and model switches of :func:`~rlmperf_lite.cost.weight_sync_time_s` and
  :func:`~rlmperf_lite.cost.switch_time_s` with the preset's ``sync_backend`` and
  ``sync_bucketed``; no trainer offload). Presets compare *layouts and modes* on one
  workload; they do not reproduce any framework's measured speed.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from importlib import resources

from ..checks import check_bool, check_choice, check_int, check_number
from ..cost import resolve_hardware, resolve_model
from ..cost.estimate import ALGOS
from ..cost.rollout import rollout_tp
from .from_cost import system_from_cost
from .system import RLSystem
from .workload import Workload

__all__ = ["FrameworkFacts", "FrameworkPreset", "FRAMEWORKS", "PRESETS", "FACT_FIELDS",
           "FILE_KEYS", "DEFAULT_WORKLOAD", "NEMO_RL_PERF_V04", "OVERRIDES", "load_facts",
           "load_presets", "load_step_times", "framework_names", "framework_system",
           "preset_gpu_split", "published_speedups"]

_DATA = resources.files("rlmperf_lite.sim") / "data"


@dataclass(frozen=True)
class FrameworkFacts:
    """What a framework's own documents say about its layout (:ref:`sec-framework-facts`).
    Every fact field has an entry in ``sources``; a fact no primary source confirmed says
    "unconfirmed"."""

    name: str
    placement_default: str
    """Where the models run by default."""
    placements_other: str
    """Other placements it offers (flags or recipes)."""
    rollout_engines: str
    training_backends: str
    modes: str
    """Synchronous and asynchronous modes."""
    staleness_knob: str
    """The knob bounding how far generation runs ahead of training."""
    staleness_default: str
    staleness_meaning: str
    runtime: str
    """What launches and drives the workers."""
    weight_sync: str
    """How new weights reach the rollout engine."""
    headline_claim: str
    claim_inputs: str
    """Model, hardware, baseline and metric behind the claim, as stated."""
    sources: dict = field(default_factory=dict)
    """Fact field -> source."""
    cite: tuple = ()
    """Bibliography keys of the book (book/references.bib) for this framework."""
    as_of: str = ""
    """The version the facts describe, as the commits or releases read with their date
    ("README @002d808a (2025); async flags PR #1152 (Jan. 2026)"). Facts go stale."""


FACT_FIELDS = ("placement_default", "placements_other", "rollout_engines", "training_backends",
               "modes", "staleness_knob", "runtime", "weight_sync", "headline_claim")
"""The fields of :class:`FrameworkFacts` that each need a source (the default and meaning of
the staleness knob share the knob's source, the claim's inputs the claim's)."""


@dataclass(frozen=True)
class FrameworkPreset:
    """A framework's layout and mode on the simulator's knobs (:ref:`sec-framework-presets`).

    ``layout``: ``"colocated"`` (every model on all GPUs, time-shared), ``"disaggregated"``
    (rollout on ``rollout_share`` of the GPUs, every training model on the rest),
    ``"separate"`` (OpenRLHF: rollout, actor + reference, and critic + reward model each on
    their own pool, in equal shares), or ``"split"`` (NeMo-Aligner: rollout, actor and reference
    on ``1 - critic_share`` of the GPUs, critic and reward model on the rest)."""

    framework: str
    """Key of :data:`FRAMEWORKS`."""
    layout: str
    mode: str = "sync"
    rollout_share: float | None = None
    """For a disaggregated layout, the share of GPUs that generate (rounded to whole
    replicas)."""
    critic_share: float | None = None
    """For a split layout, the share of GPUs of the critic + reward-model job."""
    staleness: float = 0.0
    partial_rollout: bool = False
    minibatches: int = 1
    consume: str = "ready"
    """In async mode, ``"batch"`` when an update trains only the groups of its own batch (a
    one-step-off recipe), ``"ready"`` when it takes the first ready groups (streaming)."""
    recompute_old_logprobs: bool = True
    reward_model: str | None = None
    """``"actor"``: a reward model of the actor's shape by default (NeMo-Aligner)."""
    knobs: str = ""
    """The framework's own settings this preset stands for."""
    notes: str = ""
    """How the mapping simplifies the framework."""
    sync_backend: str = "fsdp"
    """The trainer the weight sync gathers from (:func:`~rlmperf_lite.cost.weight_sync_time_s`):
    ``"fsdp"`` (FSDP / DeepSpeed ZeRO-3: HF names, ZeRO-3 shards) or ``"megatron"``."""
    sync_bucketed: bool = False
    """Weights moved in buckets (a checkpoint engine, packed IPC) rather than tensor by tensor."""
    sync_source: str = "unconfirmed: the model's defaults (FSDP trainer, tensor by tensor)"
    """Where ``sync_backend`` and ``sync_bucketed`` come from."""

    def __post_init__(self):
        check_choice("FrameworkPreset.framework", self.framework, tuple(FRAMEWORKS))
        check_choice("FrameworkPreset.layout", self.layout,
                     ("colocated", "disaggregated", "separate", "split"))
        check_choice("FrameworkPreset.mode", self.mode, ("sync", "async"))
        check_choice("FrameworkPreset.consume", self.consume, ("ready", "batch"))
        check_number("FrameworkPreset.staleness", self.staleness, low=0)
        check_int("FrameworkPreset.minibatches", self.minibatches, 1)
        check_bool("FrameworkPreset.partial_rollout", self.partial_rollout)
        check_bool("FrameworkPreset.recompute_old_logprobs", self.recompute_old_logprobs)
        check_choice("FrameworkPreset.sync_backend", self.sync_backend, ("fsdp", "megatron"))
        check_bool("FrameworkPreset.sync_bucketed", self.sync_bucketed)
        if self.layout == "disaggregated":
            check_number("FrameworkPreset.rollout_share", self.rollout_share, low=0, high=1,
                         low_open=True, high_open=True)
        if self.layout == "split":
            check_number("FrameworkPreset.critic_share", self.critic_share, low=0, high=1,
                         low_open=True, high_open=True)


# ---- the data files ---------------------------------------------------------------------------

_FACTS = tuple(f.name for f in dataclasses.fields(FrameworkFacts)
               if f.name not in ("name", "sources", "cite", "as_of"))
_PRESET_KEYS = tuple(f.name for f in dataclasses.fields(FrameworkPreset) if f.name != "framework")
FILE_KEYS = ("name", "table_row", "as_of", "facts", "sources", "cite", "presets")
"""The keys of every ``data/frameworks/<name>.json`` file."""


def _keys(where: str, got, want) -> None:
    """ValueError naming ``where`` unless ``got`` is a dict with exactly the keys ``want``."""
    if not isinstance(got, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(got).__name__}")
    missing, extra = [k for k in want if k not in got], sorted(set(got) - set(want))
    if missing or extra:
        raise ValueError(f"{where}: missing keys {missing}, unknown keys {extra}; "
                         f"expected exactly {list(want)}")


def _strings(where: str, got: dict) -> None:
    bad = [k for k, v in got.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise ValueError(f"{where}: {bad} must be non-empty strings")


def _read(path) -> dict:
    """One framework file, its keys, facts and sources checked. Raises ValueError naming it."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name}: not valid JSON ({e})") from None
    _keys(path.name, rec, FILE_KEYS)
    if not isinstance(rec["name"], str) or path.name != rec["name"].lower() + ".json":
        raise ValueError(f"{path.name}: 'name' must be a string and the file named after it "
                         f"(<name in lower case>.json), got {rec['name']!r}")
    if not isinstance(rec["table_row"], int) or rec["table_row"] < 1:
        raise ValueError(f"{path.name}: 'table_row' must be an int >= 1 (the row of the "
                         f"facts table), got {rec['table_row']!r}")
    if not isinstance(rec["as_of"], str) or not rec["as_of"].strip():
        raise ValueError(f"{path.name}: 'as_of' must be a non-empty string naming the commits or "
                         f"releases read and their date, got {rec['as_of']!r}")
    _keys(f"{path.name}: 'facts'", rec["facts"], _FACTS)
    _strings(f"{path.name}: 'facts'", rec["facts"])
    _keys(f"{path.name}: 'sources'", rec["sources"], FACT_FIELDS)
    _strings(f"{path.name}: 'sources'", rec["sources"])
    if not isinstance(rec["cite"], list) or not all(isinstance(k, str) for k in rec["cite"]):
        raise ValueError(f"{path.name}: 'cite' must be a list of bibliography keys")
    if not isinstance(rec["presets"], dict) or not rec["presets"]:
        raise ValueError(f"{path.name}: 'presets' must be a non-empty JSON object")
    return rec


def _records(directory=None) -> list:
    """The framework files of ``directory`` (default: the shipped data), in table order."""
    folder = _DATA / "frameworks" if directory is None else directory
    recs = [_read(f) for f in sorted(folder.iterdir(), key=lambda f: f.name)
            if f.name.endswith(".json")]
    rows = sorted(r["table_row"] for r in recs)
    if rows != list(range(1, len(recs) + 1)):
        raise ValueError(f"{folder}: the files' 'table_row' values must be 1..{len(recs)}, "
                         f"each once, got {rows}")
    return sorted(recs, key=lambda r: r["table_row"])


def load_facts(directory=None) -> dict:
    """{framework name: FrameworkFacts} from the JSON files of ``directory`` (default: the
    shipped ``data/frameworks``), in table order. Raises ValueError naming the file and field."""
    return {r["name"]: FrameworkFacts(name=r["name"], **r["facts"], sources=r["sources"],
                                      cite=tuple(r["cite"]), as_of=r["as_of"])
            for r in _records(directory)}


def load_presets(directory=None) -> dict:
    """{preset name: FrameworkPreset} from the JSON files' ``presets``, in table order.
    Raises ValueError naming the file, the preset and the field."""
    out = {}
    for r in _records(directory):
        for name, p in r["presets"].items():
            where = f"{r['name'].lower()}.json: preset {name!r}"
            _keys(where, p, _PRESET_KEYS)
            if name in out:
                raise ValueError(f"{where}: another file already defines this preset")
            try:
                out[name] = FrameworkPreset(r["name"], **p)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
    return out


def load_step_times(path=None) -> dict:
    """A published table of step times (default: the shipped ``data/nemo-rl-perf-v0.4.json``):
    {"source", "rows": {model: ((GPUs, s/step) baseline, (GPUs, s/step) variant)}}.
    Raises ValueError naming the file."""
    path = _DATA / "nemo-rl-perf-v0.4.json" if path is None else path
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        rows = {m: tuple((int(g), float(t)) for g, t in pair) for m, pair in rec["rows"].items()}
        if any(len(pair) != 2 for pair in rows.values()):
            raise ValueError("each row needs two (GPUs, s/step) pairs")
        return {"source": rec["source"], "rows": rows}
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path.name}: not a table of step times ({type(e).__name__}: {e})") \
            from None


FRAMEWORKS: dict[str, FrameworkFacts] = load_facts()
"""Framework name -> its checked facts (the table of :ref:`sec-framework-facts`)."""

PRESETS: dict[str, FrameworkPreset] = load_presets()   # after FRAMEWORKS: presets check it
"""Preset name -> the framework's layout and mode on the simulator
(:ref:`sec-framework-presets`)."""

NEMO_RL_PERF_V04 = load_step_times()
"""NeMo-RL's published on-policy and one-step-off step times (:ref:`sec-published-speedups`);
the rows do not state the one-step-off runs' rollout:train split."""

DEFAULT_WORKLOAD = Workload(prompts=128)
"""The presets' default workload (:ref:`sec-framework-presets`) — 128 prompts x 16 responses,
512-token prompts, log-normal responses of mean 2,048 tokens (sigma 1) cut at 8,192 — the
simulator's default lengths, four times its default batch, so that training is a visible part
of a step."""

# ---- a preset as a system ---------------------------------------------------------------------

_COST_KEYS = ("kl_coef", "reward_model", "recompute_old_logprobs", "train_efficiency",
              "decode_efficiency", "max_num_seqs", "weight_sync", "sync_backend",
              "sync_bucketed", "trainer_offload", "sleep_level", "engine_tp")
_SYSTEM_KEYS = ("mode", "staleness", "partial_rollout", "minibatches", "fuse_logps",
                "overlap_reward", "switch_s", "weight_sync_s", "consume")
_LAYOUT_KEYS = ("rollout_share", "critic_share")
OVERRIDES = _COST_KEYS + _SYSTEM_KEYS + _LAYOUT_KEYS
"""Keyword arguments :func:`framework_system` accepts besides its own."""


def framework_names() -> list[str]:
    """The preset names, in table order (``"verl"``, ``"verl-one-step-off"``, ...)."""
    return list(PRESETS)


def _preset(name) -> FrameworkPreset:
    key = name.lower() if isinstance(name, str) else name
    if key not in PRESETS:
        raise ValueError(f"name must be one of {framework_names()}, got {name!r}")
    return PRESETS[key]


def _round_to(n: float, tp: int) -> int:
    return max(tp, int(round(n / tp)) * tp)


def preset_gpu_split(name: str, gpus: int, tp: int, *, has_third_pool: bool = True,
                     rollout_share: float | None = None,
                     critic_share: float | None = None) -> dict:
    """GPUs per pool of preset ``name`` on ``gpus`` GPUs whose rollout replicas hold ``tp``
    GPUs: the framework's stated shares, the generating pool rounded to whole replicas.
    ``has_third_pool``: whether the "separate" layout needs the critic + reward pool (False:
    rollout and actor halves), and whether the "split" layout's critic job has any model.

    Returns:
        A dict pool -> GPUs, pools as :func:`framework_system` names them.

    Raises:
        ValueError: naming ``gpus`` when they are too few for the layout.
    """
    p = _preset(name)
    check_int("gpus", gpus, 1)
    check_int("tp", tp, 1)
    if p.layout == "colocated":
        return {"all": gpus}
    if p.layout == "disaggregated":
        share = p.rollout_share if rollout_share is None else rollout_share
        rollout = _round_to(gpus * share, tp)
        while rollout >= gpus and rollout > tp:
            rollout -= tp
        split = {"rollout": rollout, "train": gpus - rollout}
    elif p.layout == "separate":
        n = 3 if has_third_pool else 2
        rollout = _round_to(gpus / n, tp)
        critic = int(round(gpus / n)) if has_third_pool else 0
        split = {"rollout": rollout, "actor": gpus - rollout - critic,
                 **({"critic": critic} if has_third_pool else {})}
    else:                                                     # split: actor job | critic job
        share = p.critic_share if critic_share is None else critic_share
        actor = _round_to(gpus * (1 - share), tp)
        while actor >= gpus and actor > tp:
            actor -= tp
        split = {"actor": actor, "critic": gpus - actor}
    if min(split.values()) < 1 or split.get("rollout", split.get("actor")) < tp:
        raise ValueError(f"gpus = {gpus} is too few for the {p.layout} layout of {name!r} "
                         f"with {tp}-GPU rollout replicas: pools would be {split}")
    return split


def _preset_kwargs(p: FrameworkPreset, name: str, model, overrides: dict):
    """(cost-model kwargs, RLSystem kwargs, layout shares): the preset's, then ``overrides``."""
    cost_kw = {"recompute_old_logprobs": p.recompute_old_logprobs,
               "reward_model": model if p.reward_model == "actor" else p.reward_model,
               "sync_backend": p.sync_backend, "sync_bucketed": p.sync_bucketed,
               **{k: overrides[k] for k in _COST_KEYS if k in overrides}}
    sys_kw = {"mode": p.mode, "staleness": p.staleness, "partial_rollout": p.partial_rollout,
              "minibatches": p.minibatches, "consume": p.consume, "name": name.lower(),
              **{k: overrides[k] for k in _SYSTEM_KEYS if k in overrides}}
    shares = {k: overrides[k] for k in _LAYOUT_KEYS if k in overrides}
    for k, v in shares.items():
        check_number(k, v, low=0, high=1, low_open=True, high_open=True)
    return cost_kw, sys_kw, shares


def _system_apart(layout: str, split: dict, third: bool, model, hw, wl, common: dict,
                  sys_kw: dict) -> RLSystem:
    """A "separate" (OpenRLHF) or "split" (NeMo-Aligner) layout: the engine, costs and sync
    of :func:`system_from_cost` on the generating pool, re-placed on the preset's pools."""
    on_cpu = common["reward_model"] is None
    if layout == "separate":        # engine and sync as disaggregated onto the actor's pool
        base = system_from_cost(model, hw, wl, placement="disaggregated",
                                gpus=split["rollout"] + split["actor"],
                                rollout_gpus=split["rollout"], **common, mode="sync")
        placement = {"rollout": "rollout", "actor": "actor", "ref": "actor",
                     "critic": "critic" if third else "actor",
                     "reward": "cpu" if on_cpu else "critic"}
    else:                           # split: generation inside the actor job, colocated sync
        base = system_from_cost(model, hw, wl, placement="colocated", gpus=split["actor"],
                                **common, mode="sync")
        placement = {"rollout": "actor", "actor": "actor", "ref": "actor", "critic": "critic",
                     "reward": "cpu" if on_cpu else "critic"}
    pools = dict(split)
    if on_cpu:
        pools["cpu"] = 1
    return dataclasses.replace(base, pools=pools, placement=placement, **sys_kw)


def framework_system(name: str, *, actor="qwen2.5-7b", hardware="h100-sxm", gpus: int = 64,
                     workload: Workload | None = None, algo: str = "grpo",
                     **overrides) -> RLSystem:
    """Preset ``name``'s layout and mode (:data:`PRESETS`) for ``actor`` on ``gpus`` GPUs of
    ``hardware``, with the costs of :func:`~rlmperf_lite.sim.from_cost.system_from_cost` for
    ``workload`` (default :data:`DEFAULT_WORKLOAD`) and ``algo`` (:ref:`sec-framework-presets`).
    ``overrides`` (any of :data:`OVERRIDES`): cost-model arguments,
    :class:`~rlmperf_lite.sim.RLSystem` fields (``mode``, ``staleness``, ...), or the layout's
    ``rollout_share`` / ``critic_share``.

    Raises:
        ValueError: naming the parameter — an unknown ``name`` or override, a bad ``gpus``,
            ``workload`` or ``algo``, too few GPUs for the layout, the NeMo-Aligner layout
            with nothing for its critic job, or from the cost models and
            :class:`~rlmperf_lite.sim.RLSystem` (e.g. ``mode="async"`` on a colocated preset).
    """
    p = _preset(name)
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ValueError(f"overrides {unknown} are not parameters of framework_system; "
                         f"allowed: {list(OVERRIDES)}")
    check_int("gpus", gpus, 1)
    check_choice("algo", algo, ALGOS)
    wl = DEFAULT_WORKLOAD if workload is None else workload
    if not isinstance(wl, Workload):
        raise ValueError(f"workload must be a Workload or None, got {type(workload).__name__}")
    model, hw = resolve_model(actor, "actor"), resolve_hardware(hardware)
    cost_kw, sys_kw, shares = _preset_kwargs(p, name, model, overrides)
    tp = rollout_tp(model, hw, gpus)
    third = algo == "ppo" or cost_kw["reward_model"] is not None    # a critic + reward pool
    if p.layout == "split" and not third:
        raise ValueError(f"reward_model: {name!r} puts the critic and the reward model in a "
                         f"job of their own; with algo={algo!r} and no reward model it would "
                         f"hold nothing (pass reward_model= or algo='ppo')")
    split = preset_gpu_split(name, gpus, tp, has_third_pool=third, **shares)
    common = dict(algo=algo, **cost_kw)
    if p.layout == "colocated":
        return system_from_cost(model, hw, wl, placement="colocated", gpus=gpus, **common,
                                **sys_kw)
    if p.layout == "disaggregated":
        return system_from_cost(model, hw, wl, placement="disaggregated", gpus=gpus,
                                rollout_gpus=split["rollout"], **common, **sys_kw)
    return _system_apart(p.layout, split, third, model, hw, wl, common, sys_kw)


# ---- published step times: what a speed-up compares ------------------------------------------

def published_speedups(table: dict = NEMO_RL_PERF_V04) -> dict:
    """{model: {"step_speedup", "gpu_s_speedup", "gpus_ratio"}} of a table of (GPUs, seconds
    per step) pairs, baseline first: t0 / t1, the GPU-seconds ratio (t0 g0) / (t1 g1) (what a
    speed-up on more GPUs buys per GPU) and g1 / g0 (:ref:`sec-published-speedups`)."""
    out = {}
    for model, ((g0, t0), (g1, t1)) in table["rows"].items():
        out[model] = {"step_speedup": t0 / t1, "gpu_s_speedup": t0 * g0 / (t1 * g1),
                      "gpus_ratio": g1 / g0}
    return out
