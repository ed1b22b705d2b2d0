"""A DataLoader with worker processes (fork or spawn): they must not become sessions."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    ctx = sys.argv[1] if len(sys.argv) > 1 else "fork"
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context=ctx)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cmodel = torch.compile(model, backend="eager")
    steps = 0
    for _epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(cmodel(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            steps += 1
    print(f"steps={steps}")


if __name__ == "__main__":
    main()
