"""Graph breaks at known lines (the test finds them by their BREAK markers)."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        print("forward")  # BREAK:print
        scale = h.abs().max().item()  # BREAK:item
        return self.b(h) / (1.0 + scale)


net = torch.compile(Net(), backend="aot_eager")
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for _step in range(4):
    loss = net(torch.randn(4, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
