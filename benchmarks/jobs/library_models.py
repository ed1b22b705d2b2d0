"""Library-model jobs for the GPU check of what a user reads on a real model
(run each under `ctmon record`, with TORCH_TRACE set, on a CUDA machine):

  gpt2-train        a GPT-2 (12 layers, 768 wide, from a config: no download)
                    trained under torch.compile(model); the sequence length
                    changes once, at step 20 of 30
  llama-generate    a small Llama from a config, generate() with a static
                    cache: on CUDA transformers compiles the forward itself
  llama-generate-fixed
                    the same with the fix ctmon gives: one StaticCache length,
                    timed independently by a streamer (first token, each token)
  llama-generate-dynamic
                    the user compiles the forward (dynamic cache): prefill and
                    decode both compiled
  generate-uncompiled
                    torch.compile(model).generate(): nothing is compiled
  vit-batches       a ViT-Base-sized model trained on batches of 32 with a
                    short last batch of 20 per epoch, then single images
  llama-checkpointing
                    the Llama trained with gradient checkpointing, called
                    with use_cache=True (transformers logs why it turns it off)

The user's own lines carry markers (# CALL) for the checks to look for.
"""

from __future__ import annotations

import sys
import time

import torch


def gpt2_train() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cmodel = torch.compile(model)
    for step in range(30):
        seq = 256 if step >= 20 else 128
        ids = torch.randint(0, 50257, (8, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = cmodel(input_ids=ids, labels=ids)  # CALL
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("trained")


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()


def llama_generate() -> None:
    model = _llama()
    model.generation_config.cache_implementation = "static"
    for prompt in (32, 48, 32):
        ids = torch.randint(3, 32000, (1, prompt), device="cuda")
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)  # CALL
        torch.cuda.synchronize()
        print(f"prompt {prompt}: {out.shape[1] - prompt} tokens in {time.perf_counter() - t0:.2f} s")


class TokenTimes:
    """A transformers streamer that notes when each token arrives: generate()
    hands it the prompt first, then every new token (moved to the host, so
    each time is the device's too)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.times: list[float] = []
        self.seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass

    def summary(self) -> str:
        gaps = sorted(b - a for a, b in zip(self.times, self.times[1:], strict=False))
        med = gaps[len(gaps) // 2] * 1e3 if gaps else float("nan")
        return f"streamer: first token {(self.times[0] - self.t0) * 1e3:.1f} ms, token p50 {med:.2f} ms"


def llama_generate_fixed() -> None:
    """llama-generate with the fix ctmon gives: one cache length for every request."""
    from transformers import StaticCache

    model = _llama()
    for prompt in (32, 48, 32):
        ids = torch.randint(3, 32000, (1, prompt), device="cuda")
        cache = StaticCache(config=model.config, max_cache_len=256)
        streamer = TokenTimes()
        out = model.generate(
            ids, past_key_values=cache, max_new_tokens=64, min_new_tokens=64, do_sample=False, streamer=streamer
        )
        torch.cuda.synchronize()
        print(f"prompt {prompt}: {out.shape[1] - prompt} tokens; {streamer.summary()}")


def llama_generate_dynamic() -> None:
    model = _llama()
    model.forward = torch.compile(model.forward, dynamic=True)  # CALL
    for prompt in (32, 48, 32):
        ids = torch.randint(3, 32000, (1, prompt), device="cuda")
        streamer = TokenTimes()
        out = model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False, streamer=streamer)
        torch.cuda.synchronize()
        print(f"prompt {prompt}: {out.shape[1] - prompt} tokens; {streamer.summary()}")


def generate_uncompiled() -> None:
    model = _llama()
    cmodel = torch.compile(model)  # CALL
    ids = torch.randint(3, 32000, (1, 32), device="cuda")
    out = cmodel.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    torch.cuda.synchronize()
    print("generated", out.shape[1] - 32)


def vit_batches() -> None:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(num_labels=10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cmodel = torch.compile(model)
    for n in [32] * 4 + [20] + [32] * 4 + [20] + [1] * 5:
        images = torch.randn(n, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 10, (n,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = cmodel(pixel_values=images, labels=labels)  # CALL
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("trained")


def llama_checkpointing() -> None:
    model = _llama().float().train()
    model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cmodel = torch.compile(model)
    for _ in range(10):
        ids = torch.randint(0, 32000, (4, 256), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = cmodel(input_ids=ids, labels=ids, use_cache=True)  # CALL
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("trained")


JOBS = {
    "gpt2-train": gpt2_train,
    "llama-generate": llama_generate,
    "llama-generate-fixed": llama_generate_fixed,
    "llama-generate-dynamic": llama_generate_dynamic,
    "generate-uncompiled": generate_uncompiled,
    "vit-batches": vit_batches,
    "llama-checkpointing": llama_checkpointing,
}

if __name__ == "__main__":
    JOBS[sys.argv[1]]()
