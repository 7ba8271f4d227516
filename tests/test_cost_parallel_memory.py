"""Memory per GPU under a parallel plan: ZeRO's Fig. 1, activations (Korthikanti et al.'s
bookkeeping with FlashAttention) with pipeline microbatches in flight, long-context totals
against issue 16's expert count, and the rollout engine's weights and KV cache."""
import numpy as np
import pytest

from rlmperf_lite.cost import (ParallelPlan, TrainWorkload, activation_bytes_per_layer,
                               inference_memory_per_gpu, kv_cache_bytes_per_token,
                               memory_per_gpu, model_preset, model_state_breakdown,
                               model_state_bytes_per_gpu)
from rlmperf_lite.cost.memory import lm_head_activation_bytes
from rlmperf_lite.cost.parallel_memory import stage_params

QWEN7 = model_preset("qwen2.5-7b")
QWEN72 = model_preset("qwen2.5-72b")
LONG = TrainWorkload(global_batch=8, seq_len=32768)


@pytest.mark.parametrize("stage, gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_fig1(stage, gb):
    """Rajbhandari et al. 2020 (ZeRO), Fig. 1: 7.5B parameters on 64 GPUs with K = 12 take
    120, 31.4, 16.6 and 1.9 GB per GPU for baseline, P_os, P_os+g, P_os+g+p (to the paper's
    one decimal: 31.40625, 16.640625, 1.875)."""
    assert round(model_state_bytes_per_gpu(7.5e9, 64, stage) / 1e9, 1) == gb


def test_zero_breakdown_shards_what_each_stage_says():
    b = model_state_breakdown(1e9, 4, 2)
    assert b == {"weights_bytes": 2e9, "grads_bytes": 0.5e9, "optimizer_bytes": 3e9}
    with pytest.raises(ValueError, match="zero_stage"):
        model_state_breakdown(1e9, 4, 4)


def test_data_parallel_plan_by_hand():
    """dp = 8, no ZeRO: 16 bytes per parameter, activations of one microbatch's L layers
    (Korthikanti Table 2, no parallelism) plus its fp32 logits."""
    work = TrainWorkload(global_batch=64, seq_len=2048)
    plan = ParallelPlan(dp=8, microbatches=8, recompute="selective")
    mem = memory_per_gpu(QWEN7, plan, work)
    n = QWEN7.num_params()
    assert (mem.weights_bytes, mem.grads_bytes, mem.optimizer_bytes) == pytest.approx(
        (2 * n, 2 * n, 12 * n))
    act = QWEN7.num_hidden_layers * activation_bytes_per_layer(QWEN7, 2048, 1,
                                                               recompute="selective")
    assert mem.activation_bytes == pytest.approx(act + lm_head_activation_bytes(QWEN7, 2048, 1))
    z3 = memory_per_gpu(QWEN7, ParallelPlan(dp=8, microbatches=8, zero_stage=3), work)
    assert z3.weights_bytes + z3.grads_bytes + z3.optimizer_bytes == pytest.approx(16 * n / 8)


def test_first_stage_holds_p_microbatches():
    """1F1B: the first of p stages keeps p microbatches of its L / p layers, i.e. L layers'
    worth whatever p is (Korthikanti et al. 2022 §4.2.3), x (1 + (p-1)/(p v)) interleaved
    once m is large;
    GPipe keeps all m. With tp = 8 and sp: Table 2's 34 / t row with selective recompute."""
    work = TrainWorkload(global_batch=256, seq_len=4096)
    per_layer = activation_bytes_per_layer(QWEN72, 4096, 1, tp=8, sp=True,
                                           recompute="selective")
    L = QWEN72.num_hidden_layers
    for pp, v, in_flight in [(8, 1, 8), (8, 2, 8 * (1 + 7 / 16)), (4, 1, 4)]:
        plan = ParallelPlan(dp=256 // 64, tp=8, pp=pp, sp=True, microbatches=64, interleave=v,
                            recompute="selective")
        mem = memory_per_gpu(QWEN72, plan, work)
        assert mem.stage == "first"
        assert mem.activation_bytes == pytest.approx(per_layer * L / pp * in_flight)
    gpipe = memory_per_gpu(QWEN72, ParallelPlan(dp=4, tp=8, pp=8, sp=True, microbatches=64,
                                                recompute="selective"), work, schedule="gpipe")
    logits = lm_head_activation_bytes(QWEN72, 4096, 1, tp=8, sp=True)   # on the last stage
    assert gpipe.stage == "last"
    assert gpipe.activation_bytes == pytest.approx(per_layer * L / 8 * 64 + logits)


def test_long_context_with_flash_attention():
    """Issue 16's expert readers (FlashAttention-aware count, fp32 logits): Qwen2.5-7B on 8
    GPUs, ZeRO-3, 32k tokens, full recompute: about 46 GB per GPU (the old model, with stored
    scores, gave 180.8 GB of activations, more than selective's 131.7); Llama-3.1-70B, tp = 8
    with SP, ZeRO-1 over dp = 8, full recompute: about 57 GB (the old model: 137.6 GB)."""
    mem = {rc: memory_per_gpu(QWEN7, ParallelPlan(dp=8, zero_stage=3, recompute=rc), LONG)
           for rc in ("none", "selective", "full")}
    assert mem["full"].activation_bytes < mem["selective"].activation_bytes / 4
    assert mem["full"].total_bytes / 1e9 == pytest.approx(46, rel=0.05)
    llama = memory_per_gpu(model_preset("llama-3.1-70b"), ParallelPlan(
        dp=8, tp=8, sp=True, zero_stage=1, recompute="full"), LONG)
    assert llama.total_bytes / 1e9 == pytest.approx(57, rel=0.05)
    # the eager variant keeps Korthikanti's 5 a s^2 b of scores: terabytes at 32k
    eager = memory_per_gpu(QWEN7, ParallelPlan(dp=8, zero_stage=3), LONG, attention="eager")
    assert eager.activation_bytes > 1e12
    # chunked logits keep one 512-token chunk instead of 4 s V = 19.9 GB
    chunked = memory_per_gpu(QWEN7, ParallelPlan(dp=8, zero_stage=3, recompute="full"), LONG,
                             logits="chunked")
    V = QWEN7.vocab_size
    assert mem["full"].total_bytes - chunked.total_bytes == pytest.approx(
        4 * (32768 - 512) * V + 4 * 32768)


def test_full_recompute_checkpoint_is_sharded_by_sequence_parallelism():
    """Full recomputation keeps each layer's input, 2 s b h (Korthikanti Table 2), its s / t
    slice under SP, plus one layer's activations rebuilt in the backward and the LM head."""
    L, s, h = QWEN72.num_hidden_layers, 32768, QWEN72.hidden_size
    plan = ParallelPlan(dp=8, tp=8, sp=True, zero_stage=1, recompute="full")
    mem = memory_per_gpu(QWEN72, plan, LONG)
    layer = activation_bytes_per_layer(QWEN72, s, 1, tp=8, sp=True)
    head = lm_head_activation_bytes(QWEN72, s, 1, tp=8, sp=True)
    assert mem.activation_bytes == pytest.approx(L * 2 * s * h / 8 + layer + head)


def test_stages_hold_all_parameters():
    """Untied Qwen2.5-72B: first stage (embedding + its layers) + last stage (its layers, final
    norm, head) + the p - 2 middle stages (layers only) = every parameter."""
    embedding = QWEN72.param_breakdown()["embedding"]
    for pp in (1, 2, 4, 8):
        first, last, expert = (x[0] for x in stage_params(QWEN72, np.array([pp])))
        if pp == 1:
            assert first == last == QWEN72.num_params()
        else:
            middle = first - embedding
            assert first + last + (pp - 2) * middle == pytest.approx(QWEN72.num_params())
        assert expert == 0


def test_invalid_plans_and_bad_inputs():
    work = TrainWorkload(global_batch=64, seq_len=2048)
    with pytest.raises(ValueError, match="microbatches=1 != global_batch"):
        memory_per_gpu(QWEN7, ParallelPlan(dp=8), work)
    with pytest.raises(ValueError, match="schedule"):
        memory_per_gpu(QWEN7, ParallelPlan(dp=8, microbatches=8), work, schedule="zb")
    with pytest.raises(ValueError, match="plan"):
        memory_per_gpu(QWEN7, {"dp": 8}, work)
    plan = ParallelPlan(dp=8, microbatches=8)
    for kw, match in (({"attention": "sdpa"}, "attention must be one of"),
                      ({"logits": "bf16"}, "logits must be one of"),
                      ({"logits_chunk": 0}, "logits_chunk")):
        with pytest.raises(ValueError, match=match):
            memory_per_gpu(QWEN7, plan, work, **kw)


def test_inference_memory_with_kv_cache():
    """Rollout engine: bf16 weights / (tp pp) + KV cache of the held tokens, split over the KV
    heads (Llama-3.1-8B: 8 KV heads, 2 x 32 x 8 x 128 x 2 = 131,072 bytes per token) and
    replicated beyond tp = 8; vLLM §3: OPT-13B holds 800 KB (819,200 bytes) per token."""
    llama = model_preset("llama-3.1-8b")
    n, tokens = llama.num_params(), 10_000
    per_tok = kv_cache_bytes_per_token(llama)
    assert per_tok == 131_072
    for tp, pp, kv_div in [(1, 1, 1), (4, 1, 4), (8, 1, 8), (16, 1, 8), (2, 2, 4)]:
        m = inference_memory_per_gpu(llama, tp, pp, tokens)
        assert m.weights_bytes == pytest.approx(2 * n / (tp * pp))
        assert m.kv_cache_bytes == pytest.approx(tokens * per_tok / kv_div)
        assert m.total_bytes == m.weights_bytes + m.kv_cache_bytes
    opt = inference_memory_per_gpu(model_preset("opt-13b"), 1, 1, 1)
    assert opt.kv_cache_bytes == 819_200
    ds = model_preset("deepseek-v3")                   # latent cache: one copy per TP rank
    assert inference_memory_per_gpu(ds, 8, 1, 1).kv_cache_bytes == kv_cache_bytes_per_token(ds)
    with pytest.raises(ValueError, match="tp=3 must divide"):
        inference_memory_per_gpu(llama, 3, 1, tokens)
    with pytest.raises(ValueError, match="kv_tokens"):
        inference_memory_per_gpu(llama, 1, 1, -1)


@pytest.mark.parametrize("pp,m,v", [(4, 4, 2), (4, 8, 2), (2, 6, 4), (8, 8, 2), (2, 4, 2)])
def test_interleaved_in_flight_equals_the_simulated_schedule(pp, m, v):
    """The memory model's micro-batches in flight on the first stage of an interleaved
    schedule equal the simulated timeline's peak (model chunks in flight / v): with few
    micro-batches interleaving holds no more than 1F1B (a reviewer's case: p = m = 4, v = 2)."""
    from rlmperf_lite.parallel import interleaved_schedule, schedule_timeline
    peak = schedule_timeline(interleaved_schedule(pp, m, v)).peak_in_flight[0] / v
    work = TrainWorkload(global_batch=4 * m, seq_len=4096)
    per_layer = activation_bytes_per_layer(QWEN72, 4096, 1, tp=8, sp=True,
                                           recompute="selective")
    plan = ParallelPlan(dp=4, tp=8, pp=pp, sp=True, microbatches=m, interleave=v,
                        recompute="selective")
    mem = memory_per_gpu(QWEN72, plan, work)
    assert mem.stage == "first"
    assert mem.activation_bytes == pytest.approx(per_layer * QWEN72.num_hidden_layers / pp * peak)


def test_missing_workload_and_bad_rollout_layouts_name_the_parameter():
    """A reviewer's cases: None for the workload, a rollout tp that the KV heads and tp do not
    divide (vLLM rejects it), kv_dtype_bytes = 0."""
    from rlmperf_lite.cost import hardware_preset, inference_memory_per_gpu, train_step_time
    plan = ParallelPlan(dp=8, microbatches=8)
    with pytest.raises(ValueError, match="workload must be a TrainWorkload"):
        memory_per_gpu(QWEN72, plan, None)
    with pytest.raises(ValueError, match="hardware must be a HardwareSpec"):
        train_step_time(QWEN72, None, plan, TrainWorkload(64, 2048))
    with pytest.raises(ValueError, match="workload must be a TrainWorkload"):
        train_step_time(QWEN72, hardware_preset("h100"), plan, None)
    qwen7 = model_preset("qwen2.5-7b")                      # 28 heads, 4 KV heads
    with pytest.raises(ValueError, match="tp=7 and the 4 KV heads"):
        inference_memory_per_gpu(qwen7, tp=7)
    with pytest.raises(ValueError, match="kv_dtype_bytes"):
        inference_memory_per_gpu(qwen7, tp=4, kv_dtype_bytes=0)


def test_seq_len_beyond_the_models_positions_is_refused_as_estimate_refuses_it():
    """Issue 18: memory_per_gpu took a seq_len past max_position_embeddings, which
    estimate_rl_step refused; both now ask ModelConfig.check_positions."""
    from rlmperf_lite.cost import estimate_rl_step
    llama2 = model_preset("llama-2-7b")                     # 4,096 positions
    with pytest.raises(ValueError, match=r"^workload\.seq_len = 8192 exceeds Llama-2-7B's "
                                         r"max_position_embeddings=4096$"):
        memory_per_gpu(llama2, ParallelPlan(dp=8, microbatches=1), TrainWorkload(8, 8192))
    with pytest.raises(ValueError, match=r"^prompt_len \+ response_len = 8192 exceeds "
                                         r"Llama-2-7B's max_position_embeddings=4096$"):
        estimate_rl_step(actor=llama2, hardware="h100", prompts=4, group_size=2,
                         prompt_len=4096, response_len=4096, gpus=8)
    ok = memory_per_gpu(llama2, ParallelPlan(dp=8, microbatches=1), TrainWorkload(8, 4096))
    assert ok.total_bytes > 0
