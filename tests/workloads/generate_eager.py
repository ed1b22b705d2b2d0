"""A tiny GPT-2 (from a config, no download) trained with a compiled model,
then asked to generate() -- the form a user meets: generate() calls the
original module, so its decode steps run eager unless the forward itself
was compiled.

--form cmodel: ``cmodel.generate(...)`` (OptimizedModule forwards the
attribute to the original module); --form model: ``model.generate(...)``;
--form fixed: ``model.forward = torch.compile(model.forward)`` before
generate(), ctmon's advice applied; --form static: model.generate() with
``cache_implementation="static"``, with which transformers compiles the
decode step itself on a GPU (not on a CPU). generate() runs for --seconds (its own
max_time), long enough to be seen between two of ctmon's looks. Prints how
many tokens each call made.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--form", choices=["cmodel", "model", "fixed", "static"], default="cmodel")
parser.add_argument("--backend", default="eager")
parser.add_argument("--seconds", type=float, default=2.0)
parser.add_argument("--calls", type=int, default=1)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
config = GPT2Config(vocab_size=64, n_positions=4096, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=None)
model = GPT2LMHeadModel(config)
cmodel = torch.compile(model, backend=args.backend)  # TRAIN-COMPILE
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    ids = torch.randint(1, 60, (2, 16))
    loss = cmodel(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()

model.eval()
if args.form == "fixed":
    model.forward = torch.compile(model.forward, backend=args.backend, dynamic=True)  # FIX
    with torch.no_grad():  # its compile, outside the timed calls below
        model.generate(torch.randint(1, 60, (1, 8)), max_new_tokens=4, do_sample=False, pad_token_id=0)
gen = dict(max_new_tokens=4000, do_sample=False, max_time=args.seconds, pad_token_id=0)
if args.form == "static":
    gen.update(max_new_tokens=2000, cache_implementation="static")
with torch.no_grad():
    for _ in range(args.calls):
        prompt = torch.randint(1, 60, (1, 8))
        if args.form == "cmodel":
            out = cmodel.generate(prompt, **gen)  # GENERATE
        else:
            out = model.generate(prompt, **gen)  # GENERATE
        print("generated", out.shape[1] - prompt.shape[1], "tokens", flush=True)
