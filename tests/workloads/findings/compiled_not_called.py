"""torch.compile called, the compiled model never used: the classic
``torch.compile(model).generate()``. The compiled wrapper hands attribute
lookups (``generate``) to the original module, and generate() calls the
original model -- nothing is ever compiled, and the run is as slow as eager.

--fix compiles what generate() calls: the model's forward.
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=49)).eval()
if args.fix:
    model.forward = torch.compile(model.forward, backend="eager", dynamic=True)  # FIXED-COMPILE
    cmodel = model
else:
    cmodel = torch.compile(model, backend="eager")  # COMPILE-CALL
ids = torch.randint(0, 50, (1, 4))
with torch.no_grad():
    out = cmodel.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
print("generated", out.shape[1] - ids.shape[1], "tokens")
