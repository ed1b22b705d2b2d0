"""A tiny Hugging Face Llama (built from a config, no download) trained under
torch.compile with gradient checkpointing, its call passing use_cache=True.

transformers turns the cache off itself and logs why, once -- and the logging
call, inside the compiled code, is a graph break on every step. The library's
own message names the fix (pass use_cache=False).
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
torch.set_num_threads(1)
config = LlamaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
)
model = LlamaForCausalLM(config)
model.gradient_checkpointing_enable()
model.train()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, backend="eager")
for step in range(4):
    ids = torch.randint(0, 64, (2, 16))
    out = cmodel(input_ids=ids, labels=ids, use_cache=True)  # CKPT-CALL
    out.loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
