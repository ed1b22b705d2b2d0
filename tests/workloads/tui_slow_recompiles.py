"""A slow training loop for the TUI's end-to-end test: it recompiles (new
batch sizes), breaks the graph at known lines, prints, and keeps running for
about DURATION seconds (argv[1], default 20) with sleeps between steps."""
import sys
import time

import torch

duration = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        print("step", x.shape[0])  # BREAK:print
        return self.b(h)


torch.manual_seed(0)
net = Net()
cnet = torch.compile(net, backend="eager", dynamic=False)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
sizes = [8, 8, 12, 12, 16, 8, 20]  # each new size recompiles (dynamic=False)
start = time.monotonic()
i = 0
while time.monotonic() - start < duration:
    n = sizes[i] if i < len(sizes) else 8
    loss = cnet(torch.randn(n, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    i += 1
    time.sleep(0.25)
print(f"done after {i} steps", flush=True)
