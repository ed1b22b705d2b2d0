"""accelerate makes the torch.compile call (its dynamo plugin), in one CPU
process; the user's own loop calls the model, with a sequence length that
changes. The default plugin leaves ``dynamic`` unset: the second length
recompiles.

--dynamic  the plugin's own setting: TorchDynamoPlugin(..., dynamic=True)
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import TorchDynamoPlugin

parser = argparse.ArgumentParser()
parser.add_argument("--dynamic", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, idx):
        return self.out(self.emb(idx)).mean()


plugin = TorchDynamoPlugin(backend="eager", **({"dynamic": True} if args.dynamic else {}))
accelerator = Accelerator(cpu=True, dynamo_plugin=plugin)
model = Encoder()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)  # PREPARE
for length in (8, 12, 16, 20):
    tokens = torch.randint(0, 50, (2, length))
    loss = model(tokens)  # CALL
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
print("ok")
