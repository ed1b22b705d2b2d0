"""A tiny Llama, or a tiny T5 encoder-decoder (built from a config, no
download), generating text with a compiled forward: two generate() calls with
prompts of different lengths.

--cache dynamic: the user compiles the forward (prefill and decode compiled);
--cache static: transformers compiles the decode forward itself (a static
cache, CompileConfig with the given backend; the prefill runs eager).
Prints the new tokens of every call, the truth a test compares with.
"""
import argparse

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["llama", "t5"], default="llama")
parser.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
parser.add_argument("--backend", default="eager")
parser.add_argument("--new-tokens", type=int, default=6)
parser.add_argument("--prompts", default="5,9")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
if args.model == "llama":
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=63, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
else:  # the encoder runs once per call, eager; the decoder's forward is the compiled one
    config = T5Config(
        vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2,
        decoder_start_token_id=0, eos_token_id=63, pad_token_id=0,
    )
    model = T5ForConditionalGeneration(config).eval()
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
        # a decoder-only model returns the prompt too; T5 returns the start token and the new ones
        new = out.shape[1] - (n if args.model == "llama" else 1)
        print("generated", new, "tokens", flush=True)
