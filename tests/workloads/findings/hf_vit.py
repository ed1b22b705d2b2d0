"""A tiny Hugging Face ViT (built from a config, no download) trained under
torch.compile on batches a DataLoader without drop_last gives: full batches of
4, a short last batch of 3 at the end of each epoch, then single images (the
way a model is often served).

The batch dim recompiles twice (4 -> 3 makes it dynamic, 1 is always a graph
of its own): one finding, whose advice is about batch sizes.
"""
import argparse

import torch
from transformers import ViTConfig, ViTForImageClassification

parser = argparse.ArgumentParser()
parser.add_argument("--batches", default="4,4,3,4,4,3,1,1")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
config = ViTConfig(
    image_size=16, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=1,
    num_attention_heads=2, intermediate_size=32, num_labels=3,
)
model = ViTForImageClassification(config)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, backend="eager")

for n in (int(b) for b in args.batches.split(",")):
    images, labels = torch.randn(n, 3, 16, 16), torch.randint(0, 3, (n,))
    out = cmodel(pixel_values=images, labels=labels)  # BATCH-CALL
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("ok")
