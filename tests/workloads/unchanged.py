"""Compiled workloads whose PyTorch trace must be the same with and without ctmon.

Usage: unchanged.py WORKLOAD [STEPS]. Prints "LOOP_STEPS n" (the loop's own
count of optimizer steps or inference calls) when it finishes.
"""
import inspect
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
torch.set_num_threads(1)


class MLP(torch.nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Checkpointed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(MLP() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def compiled_optimizer_step(steps: int) -> int:
    # The PyTorch tutorial's recipe: the model runs eager, the step is compiled.
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    opt_step = torch.compile(opt.step, backend="eager")
    for _ in range(steps):
        model(torch.randn(8, 32)).sum().backward()
        opt_step()
        opt.zero_grad()
    return steps


def optimizer_step_through_dynamo_optimize(steps: int) -> int:
    # Compiled without torch.compile: ctmon's optimizer hook stays registered
    # while Dynamo traces the step, which inlines it.
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    opt_step = torch._dynamo.optimize("eager")(opt.step)
    for _ in range(steps):
        model(torch.randn(8, 32)).sum().backward()
        opt_step()
        opt.zero_grad()
    return steps


def compiled_ddp_no_sync(steps: int) -> int:
    store = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    try:
        model = MLP()
        cmodel = torch.compile(DDP(model), backend="aot_eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            with cmodel.no_sync():
                cmodel(torch.randn(8, 32)).sum().backward()
            cmodel(torch.randn(8, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
        # Let gloo's worker thread finish releasing the last all-reduce before
        # the process group is freed: PyTorch frees it with the GIL held and
        # joins that thread, which may still need the GIL to drop the Python
        # state a finished work captured (a teardown deadlock in torch 2.13,
        # seen with and without ctmon's agent in the job).
        dist.barrier()
        time.sleep(0.2)
    finally:
        dist.destroy_process_group()
        os.unlink(store.name)
    return steps


def compiled_submodules(steps: int) -> int:
    model = torch.nn.Sequential(MLP(), torch.nn.ReLU(), MLP())
    model[0] = torch.compile(model[0], backend="aot_eager")
    model[2] = torch.compile(model[2], backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    return steps


def compiled_model_with_compiled_submodule(steps: int) -> int:
    model = torch.nn.Sequential(MLP(), torch.nn.ReLU(), MLP())
    model[0] = torch.compile(model[0], backend="aot_eager")
    cmodel = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        cmodel(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    return steps


def hooks_on_compiled_model(steps: int) -> int:
    model = torch.nn.Sequential(MLP(), torch.nn.ReLU(), MLP())
    model[0].register_forward_hook(lambda mod, args, out: out * 2)
    model[2].register_forward_pre_hook(lambda mod, args: None)
    cmodel = torch.compile(model, backend="aot_eager")
    cmodel.register_forward_hook(lambda mod, args, out: None)
    with torch.no_grad():
        for _ in range(steps):
            cmodel(torch.randn(8, 32))
    return steps


def checkpointing_in_compiled_model(steps: int) -> int:
    model = Checkpointed()
    cmodel = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        cmodel(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    return steps


def module_compile_in_place(steps: int) -> int:
    model = MLP().eval()
    model.compile(backend="eager")
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(8, 32))
    return steps


@torch._dynamo.disable
def print_stack_once(seen: list[bool]) -> None:
    # What inspect.stack() shows inside a compiled function (run eager here):
    # the frames from this script's module frame on, innermost last.
    if seen:
        return
    seen.append(True)
    frames = [(f.filename, f.function) for f in reversed(inspect.stack())]
    start = next(i for i, (fn, name) in enumerate(frames) if name == "<module>" and fn == os.path.abspath(__file__))
    print("STACK " + json.dumps([f"{os.path.basename(fn)}:{name}" for fn, name in frames[start:]]))


def compiled_function_inference(steps: int) -> int:
    model = MLP().eval()
    seen: list[bool] = []

    @torch.compile(backend="eager")
    def predict(x: torch.Tensor) -> torch.Tensor:
        y = model(x)
        print_stack_once(seen)
        return y.softmax(-1)

    with torch.no_grad():
        for _ in range(steps):
            predict(torch.randn(8, 32))
    return steps


WORKLOADS = {
    "opt_step": compiled_optimizer_step,
    "opt_step_dynamo_optimize": optimizer_step_through_dynamo_optimize,
    "ddp": compiled_ddp_no_sync,
    "submodules": compiled_submodules,
    "nested": compiled_model_with_compiled_submodule,
    "hooks": hooks_on_compiled_model,
    "checkpoint": checkpointing_in_compiled_model,
    "function": compiled_function_inference,
    "module_compile": module_compile_in_place,
}

if __name__ == "__main__":
    n = WORKLOADS[sys.argv[1]](int(sys.argv[2]) if len(sys.argv) > 2 else 6)
    print(f"LOOP_STEPS {n}")
