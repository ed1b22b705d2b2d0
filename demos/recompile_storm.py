"""Demo 2 -- a recompile storm: every batch has a new sequence length.

The situation: fine-tuning a GPT on variable-length text with the usual
"pad to the longest sample in the batch" collate, so each batch comes with a
different sequence length. The model is compiled with ``dynamic=False`` --
common in practice: people set it to get static-shape kernels, because CUDA
graphs (``mode="reduce-overhead"``) want static shapes, or after a bad
experience with dynamic shapes. (With the default ``dynamic=None``, Dynamo's
"automatic dynamic shapes" would recompile once at the second length with a
symbolic length and stop there; ``dynamic=False`` switches that off, and so
does ``torch._dynamo.config.automatic_dynamic_shapes = False``.)

What happens: each new length fails the guard ``tensor 'idx' size mismatch at
index 1`` and compiles a new graph (forward and backward). After 8 graphs the
frame reaches ``torch._dynamo.config.recompile_limit`` (8), Dynamo prints a
warning once, and from then on every batch whose length has no graph runs
*eagerly* -- silently slower, for the rest of the run. Meanwhile each
recompile stalled a step.

In ctmon: the Frames table shows GPT.forward's budget at 8/8, limit hit; the
recompile reasons read "size mismatch at index 1. expected 41, actual 107";
the step-time chart has a spike per compile; the report has limit_hits = 1.

--fix (= --fix dynamic): ``torch._dynamo.mark_dynamic(idx, 1)`` on every
batch tells Dynamo the sequence dimension varies, so one graph with a
symbolic length serves every batch: one compile, no recompiles.
--fix bucket: pad every batch up to one of a few fixed lengths (powers of two
from --min-bucket up); a handful of static graphs, no limit, and static
shapes stay available to CUDA graphs. Padding is at the right with targets
set to -100 (ignored by the loss), so with causal attention the loss over
real tokens is unchanged.
"""

from __future__ import annotations

import time

import torch
from _common import add_common_args, describe, finish_common_args, fmt_s, parser
from _tinygpt import GPT, SyntheticText, autocast, make_optimizer, model_config, resolve_device


def bucket_length(n: int, smallest: int, largest: int) -> int:
    """The smallest power-of-two multiple of ``smallest`` that holds ``n`` (capped at ``largest``)."""
    b = smallest
    while b < n:
        b *= 2
    return min(b, largest)


def main() -> None:
    p = parser(__doc__)
    add_common_args(p, cpu_backend="aot_eager", fix=False)
    p.add_argument("--fix", nargs="?", const="dynamic", choices=("dynamic", "bucket"), default=None,
                   help="dynamic (the default of a bare --fix): mark the sequence dim dynamic; "
                        "bucket: pad to a few fixed lengths")
    p.add_argument("--batch-size", type=int, default=None, help="default: 8 on cpu, 16 on cuda")
    p.add_argument("--min-len", type=int, default=None, help="shortest sample (default: 8 on cpu, 64 on cuda)")
    p.add_argument("--max-len", type=int, default=None, help="longest sample (default: 128 on cpu, 512 on cuda)")
    p.add_argument("--min-bucket", type=int, default=None,
                   help="smallest bucket for --fix bucket (default: max-len / 4)")
    args = finish_common_args(p.parse_args(), cpu_steps=24, cuda_steps=120)
    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    B = args.batch_size or (16 if on_cuda else 8)
    min_len = args.min_len or (64 if on_cuda else 8)
    max_len = args.max_len or (512 if on_cuda else 128)
    min_bucket = args.min_bucket or max(8, max_len // 4)

    torch.manual_seed(args.seed)
    cfg = model_config(device, block_size=max_len)
    model = GPT(cfg).to(device)
    opt = make_optimizer(model, lr=6e-4 if on_cuda else 3e-3)
    # The anti-pattern's setting, kept with --fix too: the fixes work with it.
    cmodel = torch.compile(model, backend=args.backend, dynamic=False)
    data = SyntheticText(cfg.vocab_size, seed=args.seed)
    lengths_rng = torch.Generator().manual_seed(args.seed + 1)

    fix = {None: "none (dynamic=False, a new graph per length)",
           "dynamic": "mark_dynamic(idx, 1)", "bucket": f"pad to buckets from {min_bucket}"}[args.fix]
    print(f"recompile_storm: batch {B}, sample lengths {min_len}..{max_len} padded per batch, "
          f"device {device.type}, backend {args.backend}, {args.steps} steps; fix: {fix}")

    seen: set[int] = set()
    new_len_times: list[float] = []
    other_times: list[float] = []
    for step in range(1, args.steps + 1):
        # Length-grouped batches (what group_by_length samplers produce):
        # similar lengths within a batch, a different length every batch.
        target = int(torch.randint(min_len, max_len + 1, (1,), generator=lengths_rng))
        low = max(min_len, (3 * target) // 4)
        sample_lens = torch.randint(low, target + 1, (B,), generator=lengths_rng).tolist()
        longest = max(sample_lens)
        pad_to = bucket_length(longest, min_bucket, max_len) if args.fix == "bucket" else longest
        x, y = data.ragged_batch(sample_lens, pad_to, device)
        if args.fix == "dynamic":
            # The sequence dimension varies from batch to batch: say so, and
            # Dynamo compiles one graph with a symbolic length.
            torch._dynamo.mark_dynamic(x, 1)
            torch._dynamo.mark_dynamic(y, 1)
        new = pad_to not in seen
        seen.add(pad_to)

        t0 = time.perf_counter()
        with autocast(device):
            _, loss = cmodel(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item()
        dt = time.perf_counter() - t0
        (new_len_times if new else other_times).append(dt)
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            print(f"step {step:4d}/{args.steps}  len {pad_to:4d}{' (new)' if new else '      '}  "
                  f"loss {loss_v:.3f}  {fmt_s(dt)}  distinct lengths so far: {len(seen)}")

    print(f"summary: {len(seen)} distinct padded lengths in {args.steps} steps; "
          f"steps with a new length {describe(new_len_times)}; other steps {describe(other_times)}")
    limit = torch._dynamo.config.recompile_limit
    if args.fix is None and len(seen) > limit:
        print(f"         recompile_limit is {limit}: {len(seen) - limit} of the lengths got no graph "
              f"and ran eagerly (see Dynamo's warning above)")

if __name__ == "__main__":
    main()
