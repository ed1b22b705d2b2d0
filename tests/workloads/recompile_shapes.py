"""Shape recompiles: dynamic=False makes every new sequence length a recompile."""
import torch

torch.manual_seed(0)


def attention_scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)


scores = torch.compile(attention_scores, backend="eager", dynamic=False)
for seq in (8, 12, 16, 12):
    q = torch.randn(2, seq, 16)
    scores(q, q)
print("ok")
