"""Demo 6 -- serving with changing batch sizes: warm-up and bucketing.

An inference loop (no optimizer, ``torch.inference_mode()``) serves a stream
of requests; a dynamic batcher hands the model whatever is queued, so the
batch size changes from request to request (1 .. --max-batch sequences of
--seq-len tokens). The model returns the next token of each sequence.

Default run (the anti-pattern): the model is compiled with ``dynamic=False``
(static shapes, as serving code often does, e.g. for CUDA graphs) and not
warmed up. So the first request of every new batch size compiles *while a
client waits*: latency spikes of a compile each. After 8 batch sizes the
frame reaches the recompile limit and every further new size runs eagerly.
(With the default ``dynamic=None`` it is milder but of the same kind: the
first request compiles, the second size recompiles with a symbolic batch
size, and batch size 1 gets its own graph -- still compiles during serving.)

--fix: the serving practice --
  * buckets: pad each batch up to the next of a few sizes (1, 2, 4, 8, 16,
    32, capped at --max-batch) and drop the padded rows from the output; a
    handful of static graphs covers every request;
  * warm-up: run every bucket once before taking traffic, so all compiles
    happen at start-up and none during serving.
Result: the same compiles, all before the first request; serving latency is
flat, nothing runs eagerly, and padding costs little next to a compile.

In ctmon: the step-time chart (one step per request, marked with
ctmon.step()) has a spike per new batch size in the default run and none
with --fix; the Frames table shows GPT.forward's budget reaching 8/8 with
the limit hit in the default run, and one entry per bucket with --fix; the
report's steps.compile_steps counts the requests that overlapped a compile
(0 with --fix).
"""

from __future__ import annotations

import time

import torch
from _common import (
    add_common_args,
    add_mode_arg,
    compile_kwargs,
    ctmon_step,
    describe,
    finish_common_args,
    fmt_s,
    parser,
)
from _tinygpt import GPT, SyntheticText, autocast, model_config, resolve_device

step_mark = ctmon_step()  # one ctmon step per served request


def buckets_up_to(max_batch: int) -> list[int]:
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


def main() -> None:
    p = parser(__doc__)
    add_common_args(p, steps_help="requests to serve", cpu_backend="aot_eager",
                    fix_help="pad to a few bucket sizes and warm every bucket up before serving")
    add_mode_arg(p)
    p.add_argument("--max-batch", type=int, default=None, help="largest batch (default: 16 on cpu, 32 on cuda)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: 64 on cpu, 256 on cuda)")
    args = finish_common_args(p.parse_args(), cpu_steps=40, cuda_steps=300)
    device = resolve_device(p, args)
    on_cuda = device.type == "cuda"
    max_batch = args.max_batch or (32 if on_cuda else 16)
    T = args.seq_len or (256 if on_cuda else 64)
    buckets = buckets_up_to(max_batch)

    torch.manual_seed(args.seed)
    cfg = model_config(device, block_size=max(T, 128))
    model = GPT(cfg).to(device).eval()
    cmodel = model if args.mode == "eager" else torch.compile(model, dynamic=False, **compile_kwargs(args))
    data = SyntheticText(cfg.vocab_size, seed=args.seed)
    sizes_rng = torch.Generator().manual_seed(args.seed + 1)
    requests = [int(n) for n in torch.randint(1, max_batch + 1, (args.steps,), generator=sizes_rng)]

    def serve(x: torch.Tensor) -> list[int]:
        """One request: the next token of every sequence in the batch."""
        n = x.shape[0]
        if args.fix:
            bucket = next(b for b in buckets if b >= n)
            if bucket > n:  # pad with dummy rows; rows do not interact
                x = torch.cat([x, x.new_zeros(bucket - n, x.shape[1])])
        with autocast(device):
            logits, _ = cmodel(x)
        return logits[:n, -1].argmax(-1).tolist()  # .tolist() waits for the device

    print(f"inference_buckets: {args.steps} requests of 1..{max_batch} x {T} tokens, device {device.type}, "
          f"{'eager' if args.mode == 'eager' else f'backend {args.backend}, mode {args.mode}'}; "
          + (f"fix: buckets {buckets}, warmed up before serving" if args.fix
             else "dynamic=False, no warm-up"))

    with torch.inference_mode():
        if args.fix:
            t0 = time.perf_counter()
            for b in buckets:
                serve(data.batch(b, T, device)[0])
            print(f"warm-up: {len(buckets)} buckets compiled in {fmt_s(time.perf_counter() - t0)}, before serving")

        step_mark()  # serving starts here: requests are the steps
        latencies: list[float] = []
        seen: set[int] = set(buckets) if args.fix else set()  # shapes the model has run
        for i, n in enumerate(requests, 1):
            x = data.batch(n, T, device)[0]
            t0 = time.perf_counter()
            serve(x)
            dt = time.perf_counter() - t0
            step_mark()
            latencies.append(dt)
            shape = next(b for b in buckets if b >= n) if args.fix else n
            new = shape not in seen
            seen.add(shape)
            if i == 1 or i % args.log_every == 0 or i == len(requests):
                print(f"request {i:4d}/{len(requests)}  batch {n:3d}{' (new shape)' if new else '            '}  "
                      f"latency {fmt_s(dt)}")

    slow = sum(1 for t in latencies if t > 0.25)
    print(f"summary: {len(requests)} requests, latency {describe(latencies)}; "
          f"{len(seen)} distinct batch shapes; {slow} requests over 250 ms")
    limit = torch._dynamo.config.recompile_limit
    if not args.fix and len(seen) > limit:
        print(f"         recompile_limit is {limit}: {len(seen) - limit} batch sizes got no graph and ran eagerly")


if __name__ == "__main__":
    main()
