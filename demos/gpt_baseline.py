"""Demo 1 -- the healthy baseline: a small GPT trained with torch.compile.

A decoder-only transformer (demos/_tinygpt.py) trains on synthetic text with
static shapes: every batch has the same batch size and sequence length, the
model is compiled once and the loop never leaves the compiled graph. This is
what a good run looks like in ctmon, to compare the other demos with:

  * one compile at the first step (forward, then backward at the first
    backward pass), no recompiles, no graph breaks;
  * the first step is slow (it compiles), every later step takes about the
    same time: p50 and p90 step times are close.

On CPU the sizes are tiny so the run takes well under a minute (most of it is
Inductor's one compile; a second run hits the compile caches). With
--device cuda it trains a ~30M-parameter GPT at batch 16 x 512 tokens in
bf16 autocast.

--fix is accepted for symmetry with the other demos and changes nothing:
there is nothing to fix here.
"""

from __future__ import annotations

import time

import torch
from _common import add_common_args, add_mode_arg, compile_kwargs, describe, finish_common_args, fmt_s, parser
from _tinygpt import GPT, SyntheticText, autocast, make_optimizer, model_config, resolve_device, sync


def main() -> None:
    p = parser(__doc__)
    add_common_args(p, fix_help="accepted for symmetry; the baseline has nothing to fix")
    add_mode_arg(p)
    p.add_argument("--batch-size", type=int, default=None, help="default: 8 on cpu, 16 on cuda")
    p.add_argument("--seq-len", type=int, default=None, help="default: 64 on cpu, 512 on cuda")
    args = finish_common_args(p.parse_args(), cpu_steps=60, cuda_steps=200)
    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    B = args.batch_size or (16 if on_cuda else 8)
    T = args.seq_len or (512 if on_cuda else 64)

    torch.manual_seed(args.seed)
    cfg = model_config(device, block_size=max(T, 128))
    model = GPT(cfg).to(device)
    opt = make_optimizer(model, lr=3e-3 if not on_cuda else 6e-4)
    cmodel = model if args.mode == "eager" else torch.compile(model, **compile_kwargs(args))
    data = SyntheticText(cfg.vocab_size, seed=args.seed)

    print(f"gpt_baseline: {model.num_params() / 1e6:.2f}M params, batch {B} x {T} tokens, "
          f"device {device.type}, {'eager' if args.mode == 'eager' else f'backend {args.backend}, mode {args.mode}'}, "
          f"{args.steps} steps"
          + ("  (--fix: nothing to fix in the baseline)" if args.fix else ""))

    step_times: list[float] = []
    t_prev = time.perf_counter()
    t_first_done = t_prev
    for step in range(1, args.steps + 1):
        x, y = data.batch(B, T, device)
        with autocast(device):
            _, loss = cmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            loss_v = loss.item()  # syncs: only on the steps that print
        if step == 1:
            sync(device)
        now = time.perf_counter()
        step_times.append(now - t_prev)
        t_prev = now
        if step == 1:
            t_first_done = now
            print(f"step {step:4d}/{args.steps}  loss {loss_v:.3f}  {fmt_s(step_times[0])} (compiles)")
        elif step % args.log_every == 0 or step == args.steps:
            print(f"step {step:4d}/{args.steps}  loss {loss_v:.3f}  {fmt_s(step_times[-1])}")

    sync(device)
    steady = step_times[1:]
    if steady:
        per_step = (time.perf_counter() - t_first_done) / len(steady)
        print(f"summary: first step {fmt_s(step_times[0])} (compile); steady steps {describe(steady)}; "
              f"{B * T / per_step:,.0f} tokens/s")
    else:
        print(f"summary: first step {fmt_s(step_times[0])} (compile)")


if __name__ == "__main__":
    main()
