"""Expert parallelism: a mixture-of-experts MLP whose E experts are split over ep ranks, tokens
sent to their experts and back with two all-to-alls (Lepikhin et al. 2020, GShard, arXiv
2006.16668, §2.2-2.3; Fedus et al. 2021, Switch Transformers, arXiv 2101.03961, §2.1-2.2;
book section :ref:`sec-expert-parallel`).

The layer, for a token x (D,): router logits l = x w_router (E,); the top-k experts by logit;
gates g = softmax(l) renormalised over those k, which equals a softmax over the k chosen logits
(GShard Algorithm 1 normalises its top-2 gates this way; Mixtral, Jiang et al. 2024, arXiv
2401.04088, §2.1, writes it as Softmax(TopK(l)); DeepSeek-V3, arXiv 2412.19437, §2.1.2, Eq. 13,
normalises the chosen affinities likewise, from sigmoid rather than softmax scores). With
``renormalize=False`` the gates are softmax(l) at the chosen experts, Switch's top-1 gate (§2.1):
renormalised top-1 gates are always 1 and would leave the router untrained. Then

    y = sum over chosen e of g_e * relu(x w_up[e]) w_down[e]

Every token is processed by its k experts: no capacity limit and no dropped tokens (dropless, as
in MegaBlocks, Gale et al. 2022, arXiv 2211.15841, and in DeepSeek-V3 §2.1.2), where GShard and
Switch cap each expert's load with a capacity factor. The top-k choice is piecewise constant,
so the router's gradient flows through the gates only.

Expert parallelism: each of ep ranks holds its own tokens (data parallel) and E/ep experts (rank
r owns experts r E/ep .. (r + 1) E/ep - 1); the router weight is replicated and its gradient
all-reduced. A token's hidden vector (D,) crosses the network once per chosen expert that lives
on another rank, on the way there (dispatch) and on the way back (combine); the backward pass
does the same two all-to-alls in reverse. The dense reference :func:`moe_forward` loops over the
experts in one process; the expert-parallel layer equals it to float rounding.
"""
from __future__ import annotations

import numpy as np

from ..checks import check_bool, check_int
from ..nn.layers import activation_backward, activation_forward, linear_backward, linear_forward
from .collectives import ProcessGroup

__all__ = ["init_moe_params", "router_forward", "router_backward", "moe_forward",
           "moe_backward", "shard_experts", "ep_moe_forward", "ep_moe_backward", "expert_load"]


def init_moe_params(D: int, F: int, E: int, seed: int = 0, dtype=np.float64) -> dict:
    """{"w_router": (D, E), "w_up": (E, D, F), "w_down": (E, F, D)}, normal / sqrt(fan-in)."""
    for name, v in (("D", D), ("F", F), ("E", E)):
        check_int(name, v, 1)
    rng = np.random.default_rng(seed)
    return {"w_router": (rng.standard_normal((D, E)) / np.sqrt(D)).astype(dtype),
            "w_up": (rng.standard_normal((E, D, F)) / np.sqrt(D)).astype(dtype),
            "w_down": (rng.standard_normal((E, F, D)) / np.sqrt(F)).astype(dtype)}


# ---- the router: logits, top-k, gates ---------------------------------------------------------
def _check_tokens(label: str, x, D: int) -> np.ndarray:
    """x as a floating (N, D) array: an int array would make the layer's outputs (zeros_like(x))
    int and truncate them."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim != 2 or x.shape[1] != D:
        fix = "; cast it, e.g. x.astype(np.float64)" if x.dtype.kind != "f" else ""
        raise ValueError(f"{label} must be a floating array of tokens (N, D) with D={D} (the "
                         f"router's input width), got dtype {x.dtype} and shape {x.shape}{fix}")
    return x


def router_forward(x, w_router, top_k: int, renormalize: bool = True):
    """x (N, D), w_router (D, E) -> (experts (N, k) int, gates (N, k)), cache.

    experts[t] are token t's k largest logits in decreasing order (ties to the lower expert id);
    gates[t] = softmax(logits[t]) at those k, renormalised to sum to 1 (the default; with k = 1
    the gate is then always 1 and the router gets no gradient), or not renormalised
    (``renormalize=False``: Switch §2.1's top-1 gate p_i(x), DeepSeekMoE's and Qwen's
    ``norm_topk_prob=False``).

    Raises:
        ValueError: top_k not an int in [1, E]; x not a floating (N, D) array; renormalize not a
            bool.
    """
    E = w_router.shape[1]
    x = _check_tokens("x", x, w_router.shape[0])
    check_bool("renormalize", renormalize)
    check_int("top_k", top_k, 1)
    if top_k > E:
        raise ValueError(f"top_k={top_k} must be <= E={E}, the number of experts")
    logits, lin_cache = linear_forward(x, w_router)                      # (N, E)
    experts = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]      # (N, k)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)                                    # (N, E) softmax
    gates = np.take_along_axis(p, experts, axis=1)                       # (N, k)
    if renormalize:
        gates = gates / gates.sum(axis=1, keepdims=True)
    return (experts, gates), (lin_cache, experts, gates, p, renormalize)


def router_backward(dgates, cache):
    """dgates (N, k) -> (dx (N, D), dw_router (D, E)). Softmax backward: renormalised gates are
    a softmax over the k chosen logits alone, so the others get no gradient; otherwise the full
    softmax over E. The choice itself is piecewise constant and has no gradient."""
    lin_cache, experts, gates, p, renormalize = cache
    dlogits = np.zeros_like(p)                                           # (N, E)
    if renormalize:
        dchosen = gates * (dgates - (dgates * gates).sum(axis=1, keepdims=True))  # (N, k)
        np.put_along_axis(dlogits, experts, dchosen, axis=1)
    else:
        np.put_along_axis(dlogits, experts, dgates, axis=1)              # dL/dp
        dlogits = p * (dlogits - (dlogits * p).sum(axis=1, keepdims=True))
    return linear_backward(dlogits, lin_cache)


# ---- one expert: relu(x w_up) w_down ----------------------------------------------------------
def _expert_forward(x, w_up, w_down):
    """x (M, D) -> (M, D)."""
    h, c_up = linear_forward(x, w_up)                                    # (M, F)
    a, c_act = activation_forward(h, "relu")                             # (M, F)
    o, c_down = linear_forward(a, w_down)                                # (M, D)
    return o, (c_up, c_act, c_down)


def _expert_backward(do, cache):
    """do (M, D) -> (dx (M, D), dw_up (D, F), dw_down (F, D))."""
    c_up, c_act, c_down = cache
    da, dw_down = linear_backward(do, c_down)                            # (M, F), (F, D)
    dh = activation_backward(da, c_act, "relu")                          # (M, F)
    dx, dw_up = linear_backward(dh, c_up)                                # (M, D), (D, F)
    return dx, dw_up, dw_down


# ---- the dense reference: one process, a loop over the experts ---------------------------------
def _check_params(label: str, params) -> None:
    keys = ("w_router", "w_up", "w_down")
    if not isinstance(params, dict) or any(k not in params for k in keys):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise ValueError(f"{label} must be a dict with keys {keys} (see init_moe_params), got "
                         f"{got}")


def moe_forward(x, params: dict, top_k: int, renormalize: bool = True):
    """x (N, D) -> y (N, D), cache (a dict; ``cache["experts"]`` (N, k) is the routing).
    ``renormalize``: see :func:`router_forward`.

    Raises:
        ValueError: x not a floating (N, D) array (int tokens would truncate y), params without
            the keys of :func:`init_moe_params`, or the router's errors.
    """
    _check_params("params", params)
    x = _check_tokens("x", x, params["w_router"].shape[0])
    (experts, gates), r_cache = router_forward(x, params["w_router"], top_k, renormalize)
    y = np.zeros_like(x)                                                 # (N, D)
    per_expert = []
    for e in range(params["w_up"].shape[0]):
        tok, slot = np.nonzero(experts == e)                             # assignments to e
        o, c = _expert_forward(x[tok], params["w_up"][e], params["w_down"][e])  # (M_e, D)
        np.add.at(y, tok, gates[tok, slot, None] * o)
        per_expert.append((tok, slot, o, c))
    return y, {"router": r_cache, "experts": experts, "gates": gates, "per_expert": per_expert}


def moe_backward(dy, cache):
    """dy (N, D) -> (dx (N, D), {"w_router": (D, E), "w_up": (E, D, F), "w_down": (E, F, D)})."""
    gates = cache["gates"]
    dx = np.zeros_like(dy)                                               # (N, D)
    dgates = np.zeros_like(gates)                                        # (N, k)
    dw_up, dw_down = [], []
    for tok, slot, o, c in cache["per_expert"]:
        dgates[tok, slot] = (dy[tok] * o).sum(axis=1)
        dxe, dwu, dwd = _expert_backward(gates[tok, slot, None] * dy[tok], c)
        np.add.at(dx, tok, dxe)
        dw_up.append(dwu)
        dw_down.append(dwd)
    dx_router, dw_router = router_backward(dgates, cache["router"])
    return dx + dx_router, {"w_router": dw_router, "w_up": np.stack(dw_up),
                            "w_down": np.stack(dw_down)}


def expert_load(routing, E: int) -> np.ndarray:
    """(E,) int: the number of (token, choice) assignments each expert receives, from an array
    of chosen expert ids (e.g. ``cache["experts"]``, (N, k)). Perfect balance is N k / E each;
    the busiest expert sets the pace of its rank (Switch §2.2 caps it with a capacity factor)."""
    check_int("E", E, 1)
    ids = np.asarray(routing).ravel()
    if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= E):
        raise ValueError(f"routing must hold int expert ids in [0, E={E}), got dtype {ids.dtype}"
                         f" with values in [{ids.min()}, {ids.max()}]; pass the E of the layer")
    return np.bincount(ids.astype(np.int64), minlength=E)


# ---- expert parallel: dispatch with all_to_all, compute, combine with all_to_all ---------------
def shard_experts(params: dict, ep: int) -> list:
    """ep per-rank dicts: the router replicated, experts r E/ep .. (r + 1) E/ep - 1 on rank r.

    Raises:
        ValueError: E not divisible by ep.
    """
    check_int("ep", ep, 1)
    E = params["w_router"].shape[1]
    if E % ep:
        raise ValueError(f"E={E} experts must be divisible by ep={ep} (each rank owns E/ep)")
    return [{"w_router": params["w_router"].copy(),
             "w_up": np.array_split(params["w_up"], ep)[r].copy(),      # (E/ep, D, F)
             "w_down": np.array_split(params["w_down"], ep)[r].copy()}  # (E/ep, F, D)
            for r in range(ep)]


def ep_moe_forward(x_per_rank: list, params_per_rank: list, top_k: int, group: ProcessGroup,
                   renormalize: bool = True):
    """The MoE layer over ep = ``group.size`` ranks.

    Args:
        x_per_rank: ep arrays (N_r, D), each rank's own tokens.
        params_per_rank: from :func:`shard_experts`.
    Returns:
        y_per_rank — ep arrays (N_r, D); cache (``cache["experts"]`` holds each rank's (N_r, k)
        routing).
    Raises:
        ValueError: E not divisible by ep, top_k not in [1, E], an x_per_rank[r] that is not a
            floating (N_r, D) array, or renormalize not a bool.
    """
    x_per_rank, E, El = _check_ep_args(x_per_rank, params_per_rank, group, renormalize)
    ep = group.size
    # 1. route locally; sort each rank's (token, choice) pairs by destination rank, local expert
    routed = [_route(x, p["w_router"], top_k, renormalize, El, ep)
              for x, p in zip(x_per_rank, params_per_rank)]
    routes = [r for r, _, _ in routed]
    # 2. dispatch: token counts per local expert, then the tokens themselves
    recv_counts = group.all_to_all([c for _, _, c in routed])            # [dst][src] (El,)
    recv = group.all_to_all([sends for _, sends, _ in routed])           # [dst][src] (M, D)
    # 3. every rank runs each of its experts once on the rows gathered from all sources
    outs, expert_caches = [], []
    for d in range(ep):
        out, caches = _run_local_experts(recv[d], recv_counts[d], params_per_rank[d], El)
        outs.append(out)                                                 # [src] (M, D)
        expert_caches.append((caches, recv_counts[d]))
    # 4. combine: outputs go back to the tokens' ranks, weighted by the gates there
    back = group.all_to_all(outs)                                        # [src][dst] (M, D)
    ys = []
    for r, (x, rt) in enumerate(zip(x_per_rank, routes)):
        o = np.concatenate(back[r])                                      # (N_r k, D), send order
        rt["o"] = o
        y = np.zeros_like(x)                                             # (N_r, D)
        np.add.at(y, rt["tok"], rt["gates"][rt["tok"], rt["slot"], None] * o)
        ys.append(y)
    cache = {"routes": routes, "expert_caches": expert_caches, "El": El,
             "experts": [rt["experts"] for rt in routes]}
    return ys, cache


def _check_ep_args(x_per_rank, params_per_rank, group, renormalize) -> tuple:
    """The checks of :func:`ep_moe_forward`: returns (checked x_per_rank, E, E / ep)."""
    if not isinstance(group, ProcessGroup):
        raise ValueError(f"group must be a ProcessGroup, got {type(group).__name__}")
    ep = group.size
    if not isinstance(x_per_rank, (list, tuple)) or not isinstance(params_per_rank, (list, tuple)) \
            or len(x_per_rank) != ep or len(params_per_rank) != ep:
        raise ValueError(f"x_per_rank and params_per_rank need one entry per rank (ep={ep})")
    for r, p in enumerate(params_per_rank):
        _check_params(f"params_per_rank[{r}]", p)
    D = params_per_rank[0]["w_router"].shape[0]
    x_per_rank = [_check_tokens(f"x_per_rank[{r}]", x, D) for r, x in enumerate(x_per_rank)]
    check_bool("renormalize", renormalize)
    E, El = params_per_rank[0]["w_router"].shape[1], params_per_rank[0]["w_up"].shape[0]
    if E % ep or El != E // ep:
        raise ValueError(f"E={E} experts must be divisible by ep={ep}, with E/ep on each rank "
                         f"(got {El}); use shard_experts")
    return x_per_rank, E, El


def _route(x, w_router, top_k, renormalize, El, ep) -> tuple:
    """One rank's routing: (route record, the rows to send to each rank ep x (M_rd, D), the
    token count per local expert of each destination ep x (El,))."""
    (experts, gates), r_cache = router_forward(x, w_router, top_k, renormalize)
    tok, slot = np.nonzero(np.ones_like(experts, bool))                  # all N_r k pairs
    e = experts[tok, slot]
    order = np.argsort(e, kind="stable")                                 # by owner, then expert
    tok, slot, e = tok[order], slot[order], e[order]
    owner = e // El
    route = {"tok": tok, "slot": slot, "owner": owner, "gates": gates, "experts": experts,
             "router": r_cache}
    sends = [x[tok[owner == d]] for d in range(ep)]
    counts = [np.bincount(e[owner == d] % El, minlength=El) for d in range(ep)]
    return route, sends, counts


def _run_local_experts(recv, recv_counts, params, El) -> tuple:
    """Rank d's experts, each once on the rows all sources sent it: (outputs per source
    [src] (M, D), the experts' caches)."""
    ep = len(recv)
    seg = [np.split(recv[s], np.cumsum(recv_counts[s])[:-1]) for s in range(ep)]
    out_seg = [[None] * El for _ in range(ep)]
    caches = []
    for le in range(El):
        rows = np.concatenate([seg[s][le] for s in range(ep)])           # (M_le, D)
        o, c = _expert_forward(rows, params["w_up"][le], params["w_down"][le])
        parts = np.split(o, np.cumsum([len(seg[s][le]) for s in range(ep)])[:-1])
        for s in range(ep):
            out_seg[s][le] = parts[s]
        caches.append(c)
    return [np.concatenate(out_seg[s]) for s in range(ep)], caches


def ep_moe_backward(dy_per_rank: list, cache, group: ProcessGroup):
    """dy_per_rank: ep arrays (N_r, D) -> (dx_per_rank, dparams_per_rank).

    dparams_per_rank[r]: "w_router" (D, E) all-reduced over the group, "w_up" (E/ep, D, F) and
    "w_down" (E/ep, F, D) of rank r's experts (summed over every token routed to them).
    The two all-to-alls of the forward run in reverse: output gradients out to the experts,
    input gradients back home.
    """
    ep, El = group.size, cache["El"]
    # 1. at the token's rank: gradients of the gates and of each expert output
    sends, dgates_all = [], []
    for dy, rt in zip(dy_per_rank, cache["routes"]):
        tok, slot, o, gates = rt["tok"], rt["slot"], rt["o"], rt["gates"]
        dgates = np.zeros_like(gates)                                    # (N_r, k)
        dgates[tok, slot] = (dy[tok] * o).sum(axis=1)
        do = gates[tok, slot, None] * dy[tok]                            # (N_r k, D)
        sends.append([do[rt["owner"] == d] for d in range(ep)])          # ep x (M_rd, D)
        dgates_all.append(dgates)
    recv = group.all_to_all(sends)                                       # [dst][src]
    # 2. at the experts' rank: backward of each expert on its gathered rows
    dx_back, dparams = [], []
    for d in range(ep):
        caches, counts = cache["expert_caches"][d]
        seg = [np.split(recv[d][s], np.cumsum(counts[s])[:-1]) for s in range(ep)]
        dx_seg = [[None] * El for _ in range(ep)]
        dw_up, dw_down = [], []
        for le in range(El):
            dxe, dwu, dwd = _expert_backward(np.concatenate([seg[s][le] for s in range(ep)]),
                                             caches[le])
            parts = np.split(dxe, np.cumsum([len(seg[s][le]) for s in range(ep)])[:-1])
            for s in range(ep):
                dx_seg[s][le] = parts[s]
            dw_up.append(dwu)
            dw_down.append(dwd)
        dx_back.append([np.concatenate(dx_seg[s]) for s in range(ep)])
        dparams.append({"w_up": np.stack(dw_up), "w_down": np.stack(dw_down)})
    # 3. input gradients back to the tokens' ranks; the router's gradient, all-reduced
    back = group.all_to_all(dx_back)                                     # [src][dst]
    dxs, dw_routers = [], []
    for r, rt in enumerate(cache["routes"]):
        dx, dw_router = router_backward(dgates_all[r], rt["router"])     # (N_r, D), (D, E)
        np.add.at(dx, rt["tok"], np.concatenate(back[r]))
        dxs.append(dx)
        dw_routers.append(dw_router)
    for p, dw in zip(dparams, group.all_reduce(dw_routers)):
        p["w_router"] = dw
    return dxs, dparams
