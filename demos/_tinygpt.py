"""Shared pieces of the demos: a small GPT, synthetic text, and CLI plumbing.

The model is a real decoder-only transformer in the style of GPT-2 / nanoGPT:
token and position embeddings, pre-LayerNorm blocks of causal self-attention
(``F.scaled_dot_product_attention`` with ``is_causal=True``) and a GELU MLP, a
final LayerNorm and an LM head tied to the token embedding. ``forward(idx,
targets)`` returns ``(logits, loss)`` so the loss is part of the compiled
graph, as in most training code.

The data is synthetic and needs no download: each sequence is a random walk
over the vocabulary, ``t[i+1] = (t[i] + d) % vocab`` with ``d`` drawn from a
few small offsets. A model can learn it (the loss falls from ``ln(vocab)``
towards ``ln(4)``), so a demo's loss line shows that training really trains.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# The model


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 128  # longest sequence the position table covers
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0


# Sizes that keep a CPU run short, and sizes that look like a real (small)
# pretraining run on one GPU: ~30M parameters.
CPU_CONFIG = GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, n_embd=64)
CUDA_CONFIG = GPTConfig(vocab_size=16384, block_size=1024, n_layer=8, n_head=8, n_embd=512)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            # ignore_index=-100: padded positions do not count
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)
        return logits, loss


def make_optimizer(model: nn.Module, lr: float = 3e-3) -> torch.optim.Optimizer:
    # foreach=True: the same fast path on CPU as on CUDA
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, foreach=True)


# ---------------------------------------------------------------------------
# Synthetic data

OFFSETS = (1, 2, 3, 5)


class SyntheticText:
    """Random walks over the vocabulary: learnable, endless, no download."""

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.vocab = vocab_size
        self.gen = torch.Generator().manual_seed(seed)
        self.offsets = torch.tensor(OFFSETS)

    def tokens(self, batch: int, length: int) -> torch.Tensor:
        start = torch.randint(0, self.vocab, (batch, 1), generator=self.gen)
        steps = self.offsets[torch.randint(0, len(OFFSETS), (batch, length - 1), generator=self.gen)]
        return torch.cat([start, start + steps.cumsum(1)], dim=1) % self.vocab

    def batch(self, batch: int, seq_len: int, device: torch.device | str = "cpu"):
        """(inputs, targets), both (batch, seq_len); targets are inputs shifted by one."""
        t = self.tokens(batch, seq_len + 1)
        x, y = t[:, :-1].contiguous(), t[:, 1:].contiguous()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def ragged_batch(self, lengths: list[int], pad_to: int, device: torch.device | str = "cpu"):
        """Samples of different lengths, right-padded to ``pad_to`` (the usual
        pad-to-longest collate). Padded inputs are token 0, padded targets -100.
        With causal attention, right padding changes nothing for real tokens."""
        x = torch.zeros(len(lengths), pad_to, dtype=torch.long)
        y = torch.full((len(lengths), pad_to), -100, dtype=torch.long)
        for i, n in enumerate(lengths):
            t = self.tokens(1, n + 1)[0]
            x[i, :n] = t[:-1]
            y[i, :n] = t[1:]
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


# ---------------------------------------------------------------------------
# Device helpers


def resolve_device(p, args) -> torch.device:
    """torch.device for --device; a clear usage error when CUDA is asked for but missing."""
    if args.device == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "no CUDA device is visible")
            p.error(f"--device cuda: CUDA is not available ({why}); run with --device cpu")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return torch.device("cuda")
    return torch.device("cpu")


def model_config(device: torch.device, **overrides) -> GPTConfig:
    base = CUDA_CONFIG if device.type == "cuda" else CPU_CONFIG
    return GPTConfig(**{**base.__dict__, **overrides})


def autocast(device: torch.device):
    """bf16 autocast on CUDA (how GPT-style models are trained); plain fp32 on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
