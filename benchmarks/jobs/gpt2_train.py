"""A Hugging Face GPT-2 (124M, from its config: nothing downloaded) trained
under torch.compile(model) on CUDA with bf16 autocast, batch 8 x 256 tokens,
until stopped: the library model ``ctmon bench`` is measured on.

    ctmon bench --modes eager,default,reduce-overhead --steps 120 benchmarks/jobs/gpt2_train.py
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
cmodel = torch.compile(model)
ids = torch.randint(0, 50257, (8, 256), device="cuda")
for _step in range(1_000_000):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = cmodel(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
