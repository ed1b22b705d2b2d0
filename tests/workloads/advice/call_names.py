"""A model called with the user's own names: ``forward(self, idx, targets)``
receives what the loop calls ``x`` and ``y``, and the sequence length changes
every batch. Compiled with dynamic=False, so each new length is a new graph
until the recompile limit (4 here).

--keywords  the call passes the targets by keyword: ``cmodel(x, targets=y)``
--fix       torch._dynamo.mark_dynamic on ``x`` and ``y`` before the call
--fix-one   the same on ``x`` alone: the graph ties its length to ``y``'s,
            and Dynamo stops with a ConstraintViolationError
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--keywords", action="store_true")
parser.add_argument("--fix", action="store_true")
parser.add_argument("--fix-one", action="store_true")
args = parser.parse_args()

torch._dynamo.config.recompile_limit = 4
torch.manual_seed(0)
torch.set_num_threads(1)


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.head = torch.nn.Linear(16, 50)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return torch.nn.functional.cross_entropy(logits.view(-1, 50), targets.view(-1))


model = TinyLM()
cmodel = torch.compile(model, backend="eager", dynamic=False)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for length in (8, 12, 16, 20, 24, 28, 32):
    x = torch.randint(0, 50, (2, length))
    y = torch.randint(0, 50, (2, length))
    if args.fix or args.fix_one:
        torch._dynamo.mark_dynamic(x, 1)
        if args.fix:
            torch._dynamo.mark_dynamic(y, 1)
    if args.keywords:
        loss = cmodel(x, targets=y)  # CALL-KW
    else:
        loss = cmodel(x, y)  # CALL
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
