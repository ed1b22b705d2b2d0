"""Demo 3 -- graph breaks: the monitoring code that creeps into forward().

A GPT whose forward() carries four things real training code accumulates,
each of which Dynamo cannot put into a graph, so it splits the graph there
("graph break"), runs that line in Python, and resumes in a new graph:

  1. a debug ``print`` (here into a debug log)                 -> print
  2. ``.item()`` to get an activation statistic as a float      -> Tensor.item()
  3. an ``if`` on a tensor value (an overflow guard)            -> data-dependent branching
  4. a NumPy call on the activations (``np.nanpercentile``)     -> NumPy function Dynamo cannot trace

(Dynamo traces many NumPy functions into the graph by itself, through
torch._numpy; ``nanpercentile`` is one it cannot, as is any NumPy function
without a torch counterpart.) The training loop also prints these numbers
every few steps -- that part is fine: it runs outside the compiled model.

What it costs: five graphs instead of one, each compiled on its own (and
each again for backward); data round trips to Python and, on a GPU, a
device-to-host sync at each ``.item()``, ``if`` and NumPy call; Inductor can
no longer fuse across the breaks.

In ctmon: the Graph breaks panel lists four sites, each with its reason and
the file:line of this script (the lines marked "BREAK:"); the Frames table
shows MonitoredGPT.forward and its "forward (resumed at line N)" pieces.
Two of the pieces compile twice: the float that ``.item()`` returned (and the
one NumPy returned) is passed into the next piece as a Python number, so
Dynamo first specialises on its value and then recompiles with it symbolic --
a graph break can cost recompiles too. So compile.graph_breaks counts more
than four events (one per break per compile) at four sites.

--fix: the same statistics without leaving the graph --
  1. no print in forward: the loop logs every N steps, outside the model
     (alternatively ``torch._dynamo.config.reorderable_logging_functions``);
  2. keep the statistic a tensor; the loop calls .item() only when it logs;
  3. a branch-free guard: ``torch.where(cond, clamped, h)`` (here ``clamp``
     alone would do; ``torch.cond`` for real control flow);
  4. the torch op instead of NumPy: ``torch.nanquantile``.
Result: one graph, 0 graph breaks, the same numbers.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from _common import add_common_args, describe, finish_common_args, fmt_s, parser
from _tinygpt import GPT, SyntheticText, autocast, make_optimizer, model_config, resolve_device

CLIP = 30.0  # activations beyond this are clamped (a crude overflow guard)
DEBUG_LOG = open(os.devnull, "w")  # --debug-log sends it to stderr


class MonitoredGPT(GPT):
    """forward() with monitoring code that graph-breaks. Returns (logits, loss, stats)."""

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        print(f"forward: batch {B} x {T}", file=DEBUG_LOG)  # BREAK:print
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        act_rms = h.detach().float().pow(2).mean().sqrt().item()  # BREAK:item
        if h.abs().amax() > CLIP:  # BREAK:branch
            h = h.clamp(-CLIP, CLIP)
        act_p99 = np.nanpercentile(np.abs(h.detach().float().cpu().numpy()), 99)  # BREAK:numpy
        logits = self.lm_head(h)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)
        return logits, loss, {"act_rms": act_rms, "act_p99": act_p99}


class FixedMonitoredGPT(GPT):
    """The same statistics, computed inside the graph. Stats stay tensors."""

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        # (1) no print here: the training loop logs, outside the compiled model
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        act_rms = h.detach().float().pow(2).mean().sqrt()  # (2) a tensor, not .item()
        h = torch.where(h.abs().amax() > CLIP, h.clamp(-CLIP, CLIP), h)  # (3) no Python if
        act_p99 = torch.nanquantile(h.detach().float().abs().flatten(), 0.99)  # (4) torch, not NumPy
        logits = self.lm_head(h)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)
        return logits, loss, {"act_rms": act_rms, "act_p99": act_p99}


def main() -> None:
    global DEBUG_LOG
    p = parser(__doc__)
    add_common_args(p, cpu_backend="aot_eager", fix_help="remove the graph breaks (see the docstring)")
    p.add_argument("--batch-size", type=int, default=None, help="default: 8 on cpu, 16 on cuda")
    p.add_argument("--seq-len", type=int, default=None, help="default: 64 on cpu, 512 on cuda")
    p.add_argument("--debug-log", action="store_true", help="show the debug prints of forward() on stderr")
    args = finish_common_args(p.parse_args(), cpu_steps=30, cuda_steps=100)
    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    B = args.batch_size or (16 if on_cuda else 8)
    T = args.seq_len or (512 if on_cuda else 64)
    if args.debug_log:
        DEBUG_LOG = sys.stderr

    torch.manual_seed(args.seed)
    cfg = model_config(device, block_size=max(T, 128))
    model = (FixedMonitoredGPT if args.fix else MonitoredGPT)(cfg).to(device)
    opt = make_optimizer(model, lr=6e-4 if on_cuda else 3e-3)
    cmodel = torch.compile(model, backend=args.backend)
    data = SyntheticText(cfg.vocab_size, seed=args.seed)
    print(f"graph_breaks: batch {B} x {T}, device {device.type}, backend {args.backend}, {args.steps} steps; "
          + ("fixed forward (no graph breaks)" if args.fix else "forward with print, .item(), if, NumPy"))

    times: list[float] = []
    for step in range(1, args.steps + 1):
        x, y = data.batch(B, T, device)
        t0 = time.perf_counter()
        with autocast(device):
            _, loss, stats = cmodel(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log = step == 1 or step % args.log_every == 0 or step == args.steps
        if log:
            # Logging happens here, outside the compiled model, every N steps.
            rms, p99, loss_v = float(stats["act_rms"]), float(stats["act_p99"]), loss.item()
        times.append(time.perf_counter() - t0)
        if log:
            print(f"step {step:4d}/{args.steps}  loss {loss_v:.3f}  act rms {rms:.3f}  "
                  f"act p99 {p99:.3f}  {fmt_s(times[-1])}")
    print(f"summary: first step {fmt_s(times[0])} (compile); later steps {describe(times[1:])}")


if __name__ == "__main__":
    main()
