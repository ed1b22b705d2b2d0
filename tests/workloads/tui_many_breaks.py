"""Many distinct graph breaks (and a few recompiles) for the TUI's fixtures."""
import torch


def noisy(x, step):
    y = x * 2
    print("noisy", step)  # BREAK:print
    s = y.sum().item()  # BREAK:item
    if y.mean() > 0:  # BREAK:data-dependent branch
        y = y + 1
    torch._dynamo.graph_break()  # BREAK:explicit
    vals = y[0].tolist()  # BREAK:tolist
    y = y * len(vals)
    torch._dynamo.graph_break()  # BREAK:explicit again
    return y.relu() + s


def helper_a(x):
    x = x.cos()
    torch._dynamo.graph_break()  # BREAK:a1
    x = x.sin()
    if x.max() > 0.5:  # BREAK:a2
        x = x * 0.5
    return x


def helper_b(x):
    n = int(x.abs().sum())  # BREAK:b1
    x = x + n
    print("helper_b", n)  # BREAK:b2
    return x.tanh()


def pipeline(x, step):
    x = noisy(x, step)
    x = helper_a(x)
    return helper_b(x)


f = torch.compile(pipeline, backend="eager")
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    n = 4 if step < 6 else 6
    out = f(torch.randn(n, 8), step)
    model(out).sum().backward()
    opt.step()
    opt.zero_grad()
print("done")
