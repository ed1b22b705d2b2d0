"""A training step compiled on its own, fed by a DataLoader whose last batch
of each epoch is short (18 samples, 4 a batch): dim 0 of the batch changes
once an epoch, and the step recompiles. The step takes the DataLoader's
batch as it comes (a list: inputs, targets) and the batch's index, as a
LightningModule's training_step does.

--drop-last        DataLoader(..., drop_last=True)
--mark             torch._dynamo.mark_dynamic on the batch's inputs and targets before the call
--mark-one         the same on the inputs alone (the graph ties their size to the targets')
--compile-dynamic  torch.compile(..., dynamic=True)
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--drop-last", action="store_true")
parser.add_argument("--mark", action="store_true")
parser.add_argument("--mark-one", action="store_true")
parser.add_argument("--compile-dynamic", action="store_true")
args = parser.parse_args()


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.fc(x).squeeze(-1), y)


torch.manual_seed(0)
torch.set_num_threads(1)
model = Regressor()
step = torch.compile(model.training_step, backend="eager", **({"dynamic": True} if args.compile_dynamic else {}))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(18, 8), torch.randn(18))
loader = DataLoader(data, batch_size=4, shuffle=True, drop_last=args.drop_last)
for epoch in range(3):
    for i, batch in enumerate(loader):
        if args.mark or args.mark_one:
            torch._dynamo.mark_dynamic(batch[0], 0)
            if args.mark:
                torch._dynamo.mark_dynamic(batch[1], 0)
        loss = step(batch, i)  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()
print("ok")
