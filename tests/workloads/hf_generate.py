"""A tiny Llama (built from a config, no download) generating text with a
compiled forward: two generate() calls with prompts of different lengths.

--cache dynamic: the user compiles the forward (prefill and decode compiled);
--cache static: transformers compiles the decode forward itself (a static
cache, CompileConfig with the given backend; the prefill runs eager).
Prints the new tokens of every call, the truth a test compares with.
"""
import argparse

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
parser.add_argument("--backend", default="eager")
parser.add_argument("--new-tokens", type=int, default=6)
parser.add_argument("--prompts", default="5,9")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
config = LlamaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    bos_token_id=0, eos_token_id=63, pad_token_id=0,
)
model = LlamaForCausalLM(config).eval()
gen = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
if args.cache == "dynamic":
    model.forward = torch.compile(model.forward, backend=args.backend, dynamic=True)  # USER-COMPILE
else:
    compile_config = CompileConfig(backend=args.backend, fullgraph=False, dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on GPUs only unless told
    gen.update(cache_implementation="static", compile_config=compile_config)

with torch.no_grad():
    for n in (int(p) for p in args.prompts.split(",")):
        ids = torch.randint(1, 60, (1, n))
        out = model.generate(ids, **gen)  # GENERATE
        print("generated", out.shape[1] - n, "tokens", flush=True)
