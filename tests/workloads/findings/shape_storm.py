"""A shape storm: every batch has a new sequence length and the encoder is
compiled with dynamic=False, so each length compiles a new version until the
recompile limit (set low here) stops compiling and the frame runs eager.

--fix marks the sequence dimension dynamic before the call
(torch._dynamo.mark_dynamic(tokens, 1)): one graph serves every length.
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
args = parser.parse_args()

torch._dynamo.config.recompile_limit = 4
torch.manual_seed(0)
proj = torch.randn(32, 32)


def encode(tokens, proj):
    h = torch.tanh(tokens @ proj)
    return h.mean(dim=1)


encode_c = torch.compile(encode, backend="eager", dynamic=False)
for seq in (16, 24, 32, 40, 48, 56, 64, 16):
    tokens = torch.randn(4, seq, 32)
    if args.fix:
        torch._dynamo.mark_dynamic(tokens, 1)
    encode_c(tokens, proj)
print("ok")
