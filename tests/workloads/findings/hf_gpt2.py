"""A tiny Hugging Face GPT-2 (built from a config, no download) trained under
torch.compile; the sequence length changes once, at step 6 of 10.

One input change recompiles several frames at the same moment (transformers
wraps the model's forward in helpers Dynamo compiles as frames of their own),
so the recording holds several recompiles with one cause.

--crash raises an exception in the first step, after the first compiles.
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--change-at", type=int, default=6)
parser.add_argument("--crash", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64)
model = GPT2LMHeadModel(config)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, backend="eager")

for step in range(args.steps):
    seq = 24 if step >= args.change_at else 16
    ids = torch.randint(0, 100, (2, seq))
    out = cmodel(input_ids=ids, labels=ids)  # SEQ-CALL
    if args.crash:
        raise RuntimeError(f"loss went bad at step {step}")  # CRASH
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("ok")
