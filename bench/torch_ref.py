"""The tiny LM and its GRPO update in PyTorch eager (CPU), for the benchmark only.

Same architecture as rlmperf_lite.nn (learned positions, pre-RMSNorm blocks, bias-free linears,
ReLU MLP, untied head), same batch, same loss (PPO-clipped surrogate, token-mean) and AdamW.
Written the way a PyTorch user would: nn.Module, F.scaled_dot_product_attention, autograd.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, D, H, Fdim):
        super().__init__()
        self.ln1, self.ln2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.wqkv, self.wo = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.up, self.down = nn.Linear(D, Fdim, bias=False), nn.Linear(Fdim, D, bias=False)
        self.H = H

    def forward(self, x):
        N, T, D = x.shape
        q, k, v = self.wqkv(self.ln1(x)).view(N, T, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(N, T, D))
        return x + self.down(F.relu(self.up(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg.hidden_size
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, D), nn.Embedding(cfg.max_seq_len, D)
        self.blocks = nn.ModuleList(Block(D, cfg.num_heads, cfg.intermediate_size)
                                    for _ in range(cfg.num_layers))
        self.ln_f, self.head = nn.RMSNorm(D, eps=1e-5), nn.Linear(D, cfg.vocab_size, bias=False)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe.weight[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def make_update(cfg, lr=1e-3):
    """Returns (model, step(tokens, old_logps, advantages, mask) -> loss) on torch tensors."""
    model = TinyLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def step(tokens, old_logps, advantages, mask, P):
        logp_all = F.log_softmax(model(tokens)[:, :-1], dim=-1)
        logps = logp_all.gather(-1, tokens[:, 1:, None])[..., 0][:, P - 1:]
        ratio = torch.exp(logps - old_logps)
        adv = advantages[:, None]
        loss = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        loss = (loss * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    return model, step
