"""PyTorch's structured-trace records -> ctmon events.

The payloads and metadata below are real records captured from torch 2.13's
``torch.__trace`` logger (long PyTorch-internal tracebacks and config dumps
shortened); see ctmon/agent/trace_convert.py for the shapes relied on.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch  # noqa: F401  (ctmon.agent.paths tells torch's files from the user's once torch is imported)

from ctmon.agent.trace import BWD_FIELDS, METRIC_FIELDS, TraceHandler
from ctmon.agent.trace_convert import TraceConverter, parse_graph_break, parse_reasons, summarize_reason
from ctmon.report.build import build_report
from ctmon.store import Session
from ctmon.wire import protocol

TORCH_DIR = os.path.dirname(torch.__file__)

# ------------------------------------------------------------ real payloads

PRINT_PAYLOAD = (
    "Graph break in user code at s_print.py:5\n"
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x"
    ", y):\n"
    "\n"
    "Failed to trace builtin operator\n"
    "  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'"
    "] (has_kwargs False)\n"
    "  Hint: Avoid calling builtin `print` with argument types ['str']. Consider using an equivalent alte"
    "rnative function/method to `print`.\n"
    "  Hint: If you are attempting to call a logging function (e.g. `print`), you can try adding it to `t"
    "orch._dynamo.config.reorderable_logging_functions`.\n"
    "  Hint: Please report an issue to PyTorch.\n"
    "\n"
    "  Developer debug context: builtin print [<class 'torch._dynamo.variables.constant.ConstantVariable'"
    ">] False\n"
    "\n"
    " For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph"
    "-break-site/gb/gb0059.html\n"
    "\n"
    "User code traceback:\n"
    '  File "/tmp/probe/dump.py", line 10, in <module>\n'
    '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
    '  File "<frozen runpy>", line 291, in run_path\n'
    '  File "<frozen runpy>", line 98, in _run_module_code\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "s_print.py", line 8, in <module>\n'
    '    torch.compile(f, backend="eager")(torch.randn(3))\n'
    '  File "s_print.py", line 5, in f\n'
    '    print("hi")\n'
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/symbolic_convert.py", line 1076,'
    " in wrapper\n"
    "    return inner_fn(self, inst)\n"
    "           ^^^^^^^^^^^^^^^^^^^^\n"
    "    ...\n"
    "torch._dynamo.exc.Unsupported: Failed to trace builtin operator\n"
)

ITEM_PAYLOAD = (
    "Graph break in user code at s_gb.py:7\n"
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x"
    ", y):\n"
    "\n"
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=Fa"
    "lse.\n"
    "  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCAL"
    "AR_OUTPUTS=1` to include these operations in the captured graph.\n"
    "\n"
    "  Developer debug context: call_method TensorVariable() item () {}\n"
    "\n"
    " For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph"
    "-break-site/gb/gb0124.html\n"
    "\n"
    "User code traceback:\n"
    '  File "/tmp/probe/dump.py", line 10, in <module>\n'
    '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
    '  File "<frozen runpy>", line 291, in run_path\n'
    '  File "<frozen runpy>", line 98, in _run_module_code\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "s_gb.py", line 14, in <module>\n'
    "    m(torch.randn(2, 4))\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1778, in _wr'
    "apped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _ca'
    "ll_impl\n"
    "    return forward_call(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1778, in _wr'
    "apped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _ca'
    "ll_impl\n"
    "    return forward_call(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "s_gb.py", line 7, in forward\n'
    "    v = y.sum().item()\n"
    "        ^^^^^^^^^^^^^^\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/symbolic_convert.py", line 1076,'
    " in wrapper\n"
    "    return inner_fn(self, inst)\n"
    "           ^^^^^^^^^^^^^^^^^^^^\n"
    "    ...\n"
    "torch._dynamo.exc.Unsupported: Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
)

BRANCH_PAYLOAD = (
    "Graph break in user code at s_gb.py:8\n"
    "Graph Break Reason: Data-dependent branching\n"
    "  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). Dynamo does not s"
    "upport tracing dynamic control flow.\n"
    "\n"
    "      The branch condition involves a tensor computed as follows:\n"
    '        # File "s_gb.py", line 8, in torch_dynamo_resume_in_forward_at_7, code: if y.mean() > 0:\n'
    "        gt = gt(mean, 0)\n"
    "    \n"
    "  Hint: For the common pattern `if tensor_cond: x = transform(x)` (e.g. clamping inf/nan values), co"
    "nsider making the code branchless by always applying the transform. Operations like torch.clamp, tor"
    "ch.nan_to_num, and torch.where are typically no-ops on well-behaved inputs and compile without graph"
    " breaks.\n"
    "  Hint: This graph break is fundamental - it is unlikely that Dynamo will ever be able to trace thro"
    "ugh your code. Consider finding a workaround.\n"
    "  Hint: Use `torch.cond` to express dynamic control flow.\n"
    "\n"
    "  Developer debug context: attempted to jump with TensorVariable()\n"
    "\n"
    " For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph"
    "-break-site/gb/gb0170.html\n"
    "\n"
    "User code traceback:\n"
    '  File "/tmp/probe/dump.py", line 10, in <module>\n'
    '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
    '  File "<frozen runpy>", line 291, in run_path\n'
    '  File "<frozen runpy>", line 98, in _run_module_code\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "s_gb.py", line 14, in <module>\n'
    "    m(torch.randn(2, 4))\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1778, in _wr'
    "apped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _ca'
    "ll_impl\n"
    "    return forward_call(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1778, in _wr'
    "apped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _ca'
    "ll_impl\n"
    "    return forward_call(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "s_gb.py", line 8, in forward\n'
    "    if y.mean() > 0:\n"
    "       ^^^^^^^^^^^^^\n"
    "\n"
    "NoneType: None\n"
)

REASONS_ONE = "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"

REASONS_LIST = (
    "[\n"
    "\"0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5\",\n"
    "\"0/1: tensor 'x' size mismatch at index 0. expected 3, actual 5\",\n"
    "\"0/0: tensor 'x' size mismatch at index 0. expected 2, actual 5\"\n"
    "]"
)

REASONS_RESUME = (
    "1/0: ___stack0 == 0.8576390743255615                          # if y.mean() > 0:  # s_gb.py:8 in tor"
    "ch_dynamo_resume_in_forward_at_7\n"
    "User stack trace:\n"
    '  File "s_gb.py", line 8, in torch_dynamo_resume_in_forward_at_7\n'
    "    if y.mean() > 0:"
)

AOT_MISS = (
    '{"cache_status_detailed": "full_miss", "key": "apz74qwfwpy7gnfdsjfb3bu6ibxxe2b6kbyvm3iucllmubdfkl44"'
    ', "cache_state": "miss", "components": [], "compile_id": "0/0"}'
)

AOT_HIT = (
    '{"cache_status_detailed": "hit", "forward_time_saved_ms": 23016.0, "backward_time_saved_ms": 1209.0,'
    ' "time_saved_ms": 24225.0, "key": "apz74qwfwpy7gnfdsjfb3bu6ibxxe2b6kbyvm3iucllmubdfkl44", "cache_sta'
    'te": "hit", "components": [], "compile_id": "0/0"}'
)

FX_HIT = (
    '{"cache_status_detailed": "hit", "triton_bundler_meta": "TritonBundlerMetadata(cached_kernel_names=['
    '], statically_launched_kernel_names=[])", "key": "fhc3gkefcmikbxco7j756lcacrdaidt7vcyhamz2clgyfhnwwu'
    'dq", "components": ["[kr7xj22lbbhx4mmyd45dsxti4ifxgwod7zlmwgjaonyuskt3stu] gm: GraphModule(", "[pupv'
    'ljbk644uwxm5vfp37hueqys3ksaviewogg3wndmblz57phe] example_inputs[0"], "cache_event_time": 17953453158'
    '86279647, "cache_state": "hit", "time_saved_ns": 22223510215}'
)

FX_MISS = (
    '{"cache_status_detailed": "full_miss", "key": "fhc3gkefcmikbxco7j756lcacrdaidt7vcyhamz2clgyfhnwwudq"'
    ', "components": ["[kr7xj22lbbhx4mmyd45dsxti4ifxgwod7zlmwgjaonyuskt3stu] gm: GraphModule(", "[pupvljb'
    'k644uwxm5vfp37hueqys3ksaviewogg3wndmblz57phe] example_inputs[0"], "cache_event_time": 17953452852729'
    '98087, "cache_state": "miss", "triton_bundler_meta": "TritonBundlerMetadata(cached_kernel_names=[], '
    'statically_launched_kernel_names=[])", "time_taken_ns": 22223510215}'
)


# --------------------------------------------------------- real metadata


def _inflate(obj):
    """Put the ~30 KB config dumps back where the captured records had them."""
    if isinstance(obj, dict):
        return {k: _inflate(v) for k, v in obj.items()}
    if isinstance(obj, str) and obj.startswith("<BIG:"):
        return json.dumps({f"{obj[5:-1]}_option_{i}": [i, "value", None] for i in range(1200)})
    return obj


METRICS_0_1 = _inflate(
    {
        "compilation_metrics": {
            "compile_id": "0/1",
            "frame_key": "2",
            "co_name": "h",
            "co_filename": "s_limit.py",
            "co_firstlineno": 2,
            "cache_size": 1,
            "accumulated_cache_size": 1,
            "guard_count": 8,
            "shape_env_guard_count": 0,
            "graph_op_count": 1,
            "graph_node_count": 3,
            "graph_input_count": 1,
            "start_time": 1795345272.207674,
            "entire_frame_compile_time_s": 0.046189,
            "backend_compile_time_s": 0.000324,
            "inductor_compile_time_s": None,
            "fail_type": None,
            "fail_reason": None,
            "non_compliant_ops": [],
            "compliant_custom_ops": [],
            "restart_reasons": [],
            "dynamo_time_before_restart_s": 0.0,
            "stack_trace": [
                "Line: 10, Name: <module>, Filename: /tmp/probe/dump.py",
                "Line: 291, Name: run_path, Filename: <frozen runpy>",
                "Line: 98, Name: _run_module_code, Filename: <frozen runpy>",
                "Line: 88, Name: _run_code, Filename: <frozen runpy>",
                "Line: 2, Name: h, Filename: s_limit.py",
            ],
            "graph_node_shapes": "{'l_x_': [3, 3], 'sum_1': []}",
            "has_guarded_code": True,
            "remote_cache_time_saved_s": None,
            "structured_logging_overhead_s": 0.003635,
            "config_suppress_errors": False,
            "config_inline_inbuilt_nn_modules": True,
            "specialize_float": False,
            "dynamo_config": "<BIG:dynamo_config>",
            "compiler_config": '{"cache_key_tag": "", "dynamic_sources": "", "dynamic_values": '
            '"", "force_cudagraph_gc": false, "force_disable_caches": false, '
            '"job_id": null, "pgo_extra_read_key": null, '
            '"pgo_extra_write_key": null, "unbacked_sources": ""}',
            "is_forward": True,
            "start_time_us": 1795345272207674,
            "duration_us": 46189,
            "dynamo_cumulative_compile_time_us": 46189,
            "aot_autograd_cumulative_compile_time_us": 324,
            "dynamo_compile_time_before_restart_us": 0,
            "structured_logging_overhead_us": 3635,
            "end_time_us": 1795345272253999,
            "log_format_version": 3,
            "inductor_config": "<BIG:inductor_config>",
            "inductor_fx_remote_cache_hit_count": 0,
            "inductor_fx_remote_cache_miss_count": 0,
            "inductor_fx_local_cache_hit_count": 0,
            "inductor_fx_local_cache_miss_count": 0,
            "aotautograd_remote_cache_hit_count": 0,
            "aotautograd_remote_cache_miss_count": 0,
            "aotautograd_local_cache_hit_count": 0,
            "aotautograd_local_cache_miss_count": 0,
            "triton_version": "",
            "feature_usage": {"dynamo.automatic_dynamic_shapes": False},
            "is_runtime": False,
            "gc_time_us": 656,
            "guard_latency_us": 79,
            "recompile_reason": "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3",
            "ir_count": 6,
            "python_version": "3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]",
            "inline_inbuilt_nn_modules_candidate": False,
            "pytorch_version": "2.13.0+cpu",
            "functorch_config": "<BIG:functorch_config>",
        },
        "frame_id": 0,
        "frame_compile_id": 1,
        "attempt": 0,
    }
)

METRICS_0_3 = _inflate(
    {
        "compilation_metrics": {
            "compile_id": "0/3",
            "co_name": None,
            "cache_size": None,
            "start_time": 1795345272.306972,
            "entire_frame_compile_time_s": 0.003467,
            "inductor_compile_time_s": None,
            "fail_type": "Unsupported",
            "fail_reason": "Dynamo recompile limit exceeded\n"
            "  Explanation: Dynamo attempted to recompile the code object too "
            "many times, exceeding the recompile_limit cache size limit "
            "(currently set to 3). Excessive recompilations can degrade "
            "performance due to the compilation overhead of each recompilation.\n"
            "  Hint: To monitor recompilations, enable TORCH_LOGS=recompiles. If "
            "recompilations are expected, consider increasing "
            "torch._dynamo.config.recompile_limit to an appropriate value.\n"
            "  Hint: See "
            "https://docs.pytorch.org/docs/main/user_guide/torch_compiler/compile/programming_model.recompilation.html "
            "for tips on dealing with recompilations.\n"
            "\n"
            "  Developer debug context: Limit type: recompile_limit\n"
            "\n"
            " For more details about this graph break, please visit: "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0039.html",
            "remote_cache_time_saved_s": None,
            "structured_logging_overhead_s": 0.000668,
            "config_suppress_errors": False,
            "config_inline_inbuilt_nn_modules": True,
            "dynamo_config": "<BIG:dynamo_config>",
            "compiler_config": '{"cache_key_tag": "", "dynamic_sources": "", "dynamic_values": '
            '"", "force_cudagraph_gc": false, "force_disable_caches": false, '
            '"job_id": null, "pgo_extra_read_key": null, '
            '"pgo_extra_write_key": null, "unbacked_sources": ""}',
            "start_time_us": 1795345272306972,
            "duration_us": 3467,
            "dynamo_cumulative_compile_time_us": 3467,
            "structured_logging_overhead_us": 668,
            "end_time_us": 1795345272310650,
            "log_format_version": 3,
            "inductor_config": "<BIG:inductor_config>",
            "inductor_fx_remote_cache_hit_count": 0,
            "inductor_fx_remote_cache_miss_count": 0,
            "inductor_fx_local_cache_hit_count": 0,
            "inductor_fx_local_cache_miss_count": 0,
            "aotautograd_remote_cache_hit_count": 0,
            "aotautograd_remote_cache_miss_count": 0,
            "aotautograd_local_cache_hit_count": 0,
            "aotautograd_local_cache_miss_count": 0,
            "triton_version": "",
            "is_runtime": False,
            "recompile_reason": "0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5",
            "python_version": "3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]",
            "inline_inbuilt_nn_modules_candidate": False,
            "pytorch_version": "2.13.0+cpu",
            "functorch_config": "<BIG:functorch_config>",
        },
        "frame_id": 0,
        "frame_compile_id": 3,
        "attempt": 0,
    }
)

BWD_METRICS = _inflate(
    {
        "bwd_compilation_metrics": {
            "compile_id": "0/0",
            "co_name": None,
            "cache_size": None,
            "start_time": 1795345307.564526,
            "inductor_compile_time_s": 1.215239,
            "code_gen_time_s": 1.16306,
            "fail_type": None,
            "fail_reason": None,
            "remote_cache_time_saved_s": None,
            "structured_logging_overhead_s": 0.057229,
            "config_suppress_errors": False,
            "config_inline_inbuilt_nn_modules": True,
            "dynamo_config": "<BIG:dynamo_config>",
            "compiler_config": '{"cache_key_tag": "", "dynamic_sources": "", '
            '"dynamic_values": "", "force_cudagraph_gc": false, '
            '"force_disable_caches": false, "job_id": null, '
            '"pgo_extra_read_key": null, "pgo_extra_write_key": null, '
            '"unbacked_sources": ""}',
            "is_forward": False,
            "start_time_us": 1795345307564526,
            "duration_us": 1222836,
            "inductor_cumulative_compile_time_us": 1215239,
            "inductor_code_gen_cumulative_compile_time_us": 1163060,
            "triton_compile_time_us": 941346,
            "structured_logging_overhead_us": 57229,
            "backward_cumulative_compile_time_us": 1222836,
            "end_time_us": 1795345308787562,
            "post_grad_pass_time_us": 7872,
            "log_format_version": 3,
            "inductor_config": "<BIG:inductor_config>",
            "inductor_fx_remote_cache_hit_count": 0,
            "inductor_fx_remote_cache_miss_count": 0,
            "inductor_fx_local_cache_hit_count": 0,
            "inductor_fx_local_cache_miss_count": 1,
            "aotautograd_remote_cache_hit_count": 0,
            "aotautograd_remote_cache_miss_count": 0,
            "aotautograd_local_cache_hit_count": 0,
            "aotautograd_local_cache_miss_count": 0,
            "triton_version": "",
            "feature_usage": {"fx_cache": True, "triton_bundling": True},
            "is_runtime": False,
            "num_graph_breaks": 0,
            "python_version": "3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]",
            "inline_inbuilt_nn_modules_candidate": False,
            "pytorch_version": "2.13.0+cpu",
            "functorch_config": "<BIG:functorch_config>",
        },
        "frame_id": 0,
        "frame_compile_id": 0,
        "attempt": 0,
    }
)

START_TRAIN = {
    "dynamo_start": {
        "stack": [
            {"line": 10, "name": "<module>", "filename": 1, "loc": 'runpy.run_path(sys.argv[0], run_name="__main__")'},
            {"line": 291, "name": "run_path", "filename": 2, "loc": ""},
            {"line": 98, "name": "_run_module_code", "filename": 2, "loc": ""},
            {"line": 88, "name": "_run_code", "filename": 2, "loc": ""},
            {"line": 7, "name": "<module>", "filename": 3, "loc": "loss = cm(x).sum()"},
            {"line": 511, "name": "__call__", "filename": 4, "loc": "return super().__call__(*args, **kwargs)"},
            {
                "line": 1778,
                "name": "_wrapped_call_impl",
                "filename": 5,
                "loc": "return self._call_impl(*args, **kwargs)",
            },
            {"line": 67, "name": "inner", "filename": 6},
        ]
    },
    "frame_id": 0,
    "frame_compile_id": 0,
    "attempt": 0,
}
STRS_TRAIN = [
    ["/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/convert_frame.py", 0],
    ["/tmp/probe/dump.py", 1],
    ["<frozen runpy>", 2],
    ["s_train.py", 3],
    ["/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", 4],
    ["/work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 5],
    ["/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/external_utils.py", 6],
]

START_LIMIT = {
    "dynamo_start": {
        "stack": [
            {"line": 10, "name": "<module>", "filename": 1, "loc": 'runpy.run_path(sys.argv[0], run_name="__main__")'},
            {"line": 291, "name": "run_path", "filename": 2, "loc": ""},
            {"line": 98, "name": "_run_module_code", "filename": 2, "loc": ""},
            {"line": 88, "name": "_run_code", "filename": 2, "loc": ""},
            {"line": 2, "name": "h", "filename": 3},
        ]
    },
    "frame_id": 0,
    "frame_compile_id": 0,
    "attempt": 0,
}
STRS_LIMIT = [
    ["/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/convert_frame.py", 0],
    ["/tmp/probe/dump.py", 1],
    ["<frozen runpy>", 2],
    ["s_limit.py", 3],
]

CAPTURED_TORCH = "/work/main/.venv/lib/python3.11/site-packages/torch"


def _interned(strs):
    """The captured ``str`` records, with torch's files where torch lives here."""
    return [[p.replace(CAPTURED_TORCH, TORCH_DIR), i] for p, i in strs]


def convert_all(conv: TraceConverter, records) -> list[dict]:
    out: list[dict] = []
    for name, t, md, extra in records:
        out += conv.convert(name, t, md, extra)
    return out


def artifact(name: str, fid: int, fcid: int, encoding: str = "json") -> dict:
    return {
        "artifact": {"name": name, "encoding": encoding},
        "frame_id": fid,
        "frame_compile_id": fcid,
        "attempt": 0,
        "has_payload": "0f09aa70fa4e20a4a21954e5f9125b51",
    }


def strs(conv: TraceConverter, table) -> None:
    for s in _interned(table):
        assert conv.convert("str", 0.0, {"str": s}, None) == []


# ------------------------------------------------------- parse_graph_break


def test_parse_graph_break_print():
    out = parse_graph_break(PRINT_PAYLOAD)
    assert (out["file"], out["line"]) == ("s_print.py", 5)
    assert out["summary"] == "Failed to trace builtin operator: print"
    assert out["explanation"].startswith("Dynamo does not know how to trace builtin operator `print`")
    assert len(out["hints"]) == 3 and out["hints"][-1] == "Please report an issue to PyTorch."
    assert out["url"] == "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html"
    assert out["gb_id"] == "gb0059"
    reason = out["reason"]
    assert reason.startswith("Encountered graph break when attempting to trace CALL")
    assert "Failed to trace builtin operator" in reason
    assert "For more details" not in reason, "the URL sentence is kept apart, not in the reason text"
    assert "symbolic_convert.py" not in reason and "User code traceback" not in reason
    stack = out["user_stack"]
    assert stack[-1] == {"file": "s_print.py", "line": 5, "name": "f", "code": 'print("hi")'}
    assert stack[-2] == {
        "file": "s_print.py",
        "line": 8,
        "name": "<module>",
        "code": 'torch.compile(f, backend="eager")(torch.randn(3))',
    }
    assert {"file": "<frozen runpy>", "line": 291, "name": "run_path"} in stack
    assert not any("symbolic_convert" in f["file"] for f in stack), "PyTorch's own traceback is not the user's"


def test_parse_graph_break_item():
    out = parse_graph_break(ITEM_PAYLOAD)
    assert (out["file"], out["line"]) == ("s_gb.py", 7)
    # the type already names Tensor.item(); nothing is appended
    assert out["summary"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert out["gb_id"] == "gb0124"
    assert out["hints"] == [
        "Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1`"
        " to include these operations in the captured graph."
    ]
    stack = out["user_stack"]
    assert stack[-1] == {"file": "s_gb.py", "line": 7, "name": "forward", "code": "v = y.sum().item()"}
    assert all(not f.get("code", "").startswith("^") for f in stack), "caret lines are not code"
    wrapped = [f for f in stack if f["name"] == "_wrapped_call_impl"]
    assert len(wrapped) == 2 and wrapped[0]["code"] == "return self._call_impl(*args, **kwargs)"


def test_parse_graph_break_data_dependent_branch():
    out = parse_graph_break(BRANCH_PAYLOAD)
    assert (out["file"], out["line"]) == ("s_gb.py", 8)
    assert out["gb_id"] == "gb0170"
    assert len(out["hints"]) == 3
    assert out["explanation"].startswith("Detected data-dependent branching")
    assert out["user_stack"][-1] == {"file": "s_gb.py", "line": 8, "name": "forward", "code": "if y.mean() > 0:"}
    assert "NoneType" not in json.dumps(out["user_stack"])
    # "The branch condition involves a tensor computed as follows" stays in the full reason
    assert "gt = gt(mean, 0)" in out["reason"]
    assert out["summary"].startswith("Data-dependent branching")


def test_graph_break_summary_does_not_quote_pytorchs_example_code():
    """The explanation of a data-dependent branch quotes an *example*
    (``e.g. `if my_tensor.sum() > 0:` ``), not the user's code; the one-line
    summary shown for the site must not present it as what the user wrote."""
    out = parse_graph_break(BRANCH_PAYLOAD)
    assert "my_tensor" not in out["summary"], out["summary"]


def test_parse_graph_break_without_header_uses_the_innermost_frame():
    body = PRINT_PAYLOAD.split("\n", 1)[1]  # drop "Graph break in user code at ..."
    out = parse_graph_break(body)
    assert (out["file"], out["line"]) == ("s_print.py", 5)
    assert out["summary"] == "Failed to trace builtin operator: print"


@pytest.mark.parametrize("text", ["", "\n\n", "garbage without structure", "Graph break in user code at x.py:notanint"])
def test_parse_graph_break_degenerate_text(text):
    out = parse_graph_break(text)
    assert out["file"] is None and out["line"] is None
    assert out["user_stack"] == []
    assert isinstance(out["summary"], str) and out["summary"]
    assert isinstance(out["reason"], str)


def test_parse_graph_break_long_reason_is_clipped():
    text = "Graph break in user code at a.py:3\nGraph Break Reason: Something\n" + ("  detail " * 5000) + "\n"
    out = parse_graph_break(text)
    assert len(out["reason"]) <= 8000
    assert out["summary"] == "Something"


def test_parse_graph_break_stack_is_bounded():
    frames = "".join(f'  File "m{i}.py", line {i}, in f{i}\n    call_{i}()\n' for i in range(40))
    out = parse_graph_break(
        "Graph break in user code at m39.py:39\nGraph Break Reason: X\n\nUser code traceback:\n" + frames
    )
    assert len(out["user_stack"]) == 12
    assert out["user_stack"][-1] == {"file": "m39.py", "line": 39, "name": "f39", "code": "call_39()"}


def test_summarize_reason():
    assert summarize_reason([]) == "graph break"
    assert summarize_reason(["", "   "]) == "graph break"
    assert (
        summarize_reason(
            [
                "Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):",
                "",
                "Failed to trace builtin operator",
                "  Explanation: ...",
                "  Hint: ...",
            ]
        )
        == "Failed to trace builtin operator"
    )
    assert summarize_reason(["Data-dependent branching", "  Explanation: ..."]) == "Data-dependent branching"
    assert summarize_reason(["Call to a function with a trailing colon:"]) == "Call to a function with a trailing colon"


# ------------------------------------------------------------ parse_reasons


def test_parse_reasons_single_string():
    assert parse_reasons(REASONS_ONE) == ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"]


def test_parse_reasons_json_list():
    assert parse_reasons(REASONS_LIST) == [
        "0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5",
        "0/1: tensor 'x' size mismatch at index 0. expected 3, actual 5",
        "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 5",
    ]


def test_parse_reasons_multiline_single_reason():
    (r,) = parse_reasons(REASONS_RESUME)
    assert r.startswith("1/0: ___stack0 == 0.8576390743255615")
    assert r.endswith("if y.mean() > 0:")


@pytest.mark.parametrize(
    "payload, expected",
    [
        (None, []),
        ("", []),
        ("[not json", ["[not json"]),
        ('["a", 3, null]', ["a", "3", "None"]),
        ("[]", []),
        ('  ["padded"]  ', ["padded"]),
    ],
)
def test_parse_reasons_edge_cases(payload, expected):
    assert parse_reasons(payload) == expected


def test_parse_reasons_are_clipped():
    (r,) = parse_reasons("0/0: " + "x" * 20_000)
    assert len(r) <= 4000
    rs = parse_reasons(json.dumps(["y" * 10_000, "short"]))
    assert len(rs[0]) <= 4000 and rs[1] == "short"


# ---------------------------------------------------------- TraceConverter


def test_compile_id():
    assert TraceConverter.compile_id({"frame_id": 3, "frame_compile_id": 1}) == "3/1"
    assert TraceConverter.compile_id({"frame_id": 0, "frame_compile_id": 0, "compiled_autograd_id": 2}) == "!2/0/0"
    assert TraceConverter.compile_id({}) is None


def test_dynamo_start_with_interned_filenames():
    conv = TraceConverter()
    strs(conv, STRS_LIMIT)
    (ev,) = conv.convert("dynamo_start", 1795345272.08, START_LIMIT, {"attr": None, "cfg": {"recompile_limit": 3}})
    assert ev["kind"] == protocol.COMPILE_START
    assert ev["compile_id"] == "0/0" and ev["frame_id"] == 0 and ev["t"] == 1795345272.08
    assert (ev["name"], ev["file"], ev["line"]) == ("h", "s_limit.py", 2)
    assert ev["user"] == {"file": "s_limit.py", "line": 2, "name": "h"}
    assert ev["user_code"] is True
    assert ev["recompile_limit"] == 3
    assert "module" not in ev
    assert protocol.decode(protocol.encode(ev)) == ev


def test_dynamo_start_of_a_compiled_module_points_at_the_user():
    conv = TraceConverter()
    strs(conv, STRS_TRAIN)
    attr = {"module": "Sequential", "module_file": f"{TORCH_DIR}/nn/modules/container.py", "module_line": 240}
    (ev,) = conv.convert("dynamo_start", 1.0, START_TRAIN, {"attr": attr, "cfg": {"recompile_limit": 8}})
    assert (ev["name"], ev["line"]) == ("inner", 67)
    assert ev["file"] == f"{TORCH_DIR}/_dynamo/external_utils.py"
    assert ev["user_code"] is False, "Dynamo compiled torch's wrapper, not user code"
    assert ev["user"] == {"file": "s_train.py", "line": 7, "name": "<module>", "code": "loss = cm(x).sum()"}
    assert ev["module"] == "Sequential" and ev["module_user"] is False
    # and the store turns that into a frame the user recognises
    s = Session()
    s.apply(ev)
    f = s.compile.frames[0]
    assert (f.loc.file, f.loc.line, f.title) == ("s_train.py", 7, "Sequential")


def test_dynamo_start_unknown_interned_id_and_empty_stack():
    conv = TraceConverter()
    md = {
        "dynamo_start": {"stack": [{"line": 4, "name": "g", "filename": 99}, "junk"]},
        "frame_id": 2,
        "frame_compile_id": 0,
        "attempt": 0,
    }
    (ev,) = conv.convert("dynamo_start", 1.0, md, None)
    assert (ev["name"], ev["file"], ev["line"]) == ("g", "99", 4)
    (ev,) = conv.convert("dynamo_start", 1.0, {"dynamo_start": {}, "frame_id": 2, "frame_compile_id": 1}, None)
    assert ev["user_code"] is False and "name" not in ev and "file" not in ev


def test_compilation_metrics_keep_only_curated_fields():
    conv = TraceConverter()
    assert len(json.dumps(METRICS_0_1)) > 100_000, "the captured record carries big config dumps"
    (ev,) = conv.convert("compilation_metrics", 1795345272.254, METRICS_0_1, {"cfg": {"recompile_limit": 3}})
    assert ev["kind"] == protocol.COMPILE
    assert ev["compile_id"] == "0/1" and ev["frame_id"] == 0
    assert set(ev) <= set(METRIC_FIELDS) | {"kind", "t", "compile_id", "frame_id", "recompile_limit"}
    for dropped in (
        "dynamo_config",
        "inductor_config",
        "functorch_config",
        "compiler_config",
        "stack_trace",
        "graph_node_shapes",
        "python_version",
        "feature_usage",
        "frame_key",
    ):
        assert dropped not in ev
    assert len(protocol.encode(ev)) < 2000
    assert ev["co_name"] == "h" and ev["co_filename"] == "s_limit.py" and ev["co_firstlineno"] == 2
    assert ev["entire_frame_compile_time_s"] == 0.046189 and ev["start_time"] == 1795345272.207674
    assert ev["recompile_reason"] == "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"
    assert ev["has_guarded_code"] is True and ev["cache_size"] == 1 and ev["guard_count"] == 8
    assert ev["recompile_limit"] == 3
    # None, [] and "" carry nothing
    for absent in ("fail_type", "fail_reason", "inductor_compile_time_s", "restart_reasons", "non_compliant_ops"):
        assert absent not in ev
    assert ev["inductor_fx_local_cache_hit_count"] == 0, "zero is a value, kept"
    assert ev["is_forward"] is True


def test_compilation_metrics_of_a_limit_hit():
    conv = TraceConverter()
    (ev,) = conv.convert("compilation_metrics", 1.0, METRICS_0_3, None)
    assert ev["compile_id"] == "0/3" and ev["frame_id"] == 0
    assert "co_name" not in ev and "cache_size" not in ev
    assert ev["fail_type"] == "Unsupported"
    assert ev["fail_reason"].startswith("Dynamo recompile limit exceeded")
    assert ev["recompile_reason"].startswith("0/2: ")


def test_compilation_metrics_long_values_are_clipped():
    md = {
        "compilation_metrics": {
            "compile_id": "5/0",
            "fail_reason": "e" * 50_000,
            "restart_reasons": ["r" * 9000] * 80,
            "non_compliant_ops": ["aten::x"],
        },
        "frame_id": 5,
        "frame_compile_id": 0,
    }
    (ev,) = TraceConverter().convert("compilation_metrics", 1.0, md, None)
    assert len(ev["fail_reason"]) <= 8000
    assert len(ev["restart_reasons"]) == 50 and all(len(r) <= 2000 for r in ev["restart_reasons"])
    assert ev["non_compliant_ops"] == ["aten::x"]


def test_bwd_compilation_metrics():
    (ev,) = TraceConverter().convert("bwd_compilation_metrics", 1795345308.79, BWD_METRICS, None)
    assert ev["kind"] == protocol.BWD_COMPILE
    assert ev["compile_id"] == "0/0" and ev["frame_id"] == 0
    assert set(ev) <= set(BWD_FIELDS) | {"kind", "t", "compile_id", "frame_id"}
    assert ev["inductor_compile_time_s"] == 1.215239 and ev["duration_us"] == 1222836
    assert ev["code_gen_time_s"] == 1.16306 and ev["inductor_fx_local_cache_miss_count"] == 1
    assert "fail_type" not in ev and "inductor_config" not in ev
    assert len(protocol.encode(ev)) < 1000
    s = Session()
    s.apply(ev)
    assert s.compile.bwd_compiles == 1 and s.compile.bwd_time_s == pytest.approx(1.222836)


@pytest.mark.parametrize(
    "name, payload, cache, result, extra",
    [
        (
            "aotautograd_cache_miss",
            AOT_MISS,
            "aot_autograd",
            "miss",
            {"key": "apz74qwfwpy7gnfdsjfb3bu6ibxxe2b6kbyvm3iucllmubdfkl44", "detail": "full_miss"},
        ),
        ("aotautograd_cache_hit", AOT_HIT, "aot_autograd", "hit", {"time_saved_s": 24.225, "detail": "hit"}),
        ("fx_graph_cache_hit", FX_HIT, "fx_graph", "hit", {"time_saved_s": 22.223510215}),
        ("fx_graph_bundled_cache_hit", FX_HIT, "fx_graph", "hit", {}),
        ("fx_graph_cache_miss", FX_MISS, "fx_graph", "miss", {"detail": "full_miss"}),
        (
            "fx_graph_cache_bypass",
            json.dumps(
                {
                    "cache_state": "bypass",
                    "cache_bypass_reason": "Can't cache HigherOrderOperators.",
                    "cache_event_time": 1795345315886279647,
                }
            ),
            "fx_graph",
            "bypass",
            {"reason": "Can't cache HigherOrderOperators."},
        ),
        (
            "aotautograd_cache_bypass",
            json.dumps(
                {
                    "cache_bypass_reason": "Cannot cache a graph with compiled autograd enabled",
                    "cache_bypass_exception_type": "BypassAOTAutogradCache",
                    "cache_bypass_traceback": ["Traceback (most recent call last):", "  File ..."],
                    "cache_bypass_hard_exception": False,
                }
            ),
            "aot_autograd",
            "bypass",
            {"reason": "Cannot cache a graph with compiled autograd enabled"},
        ),
        ("fx_graph_cache_miss", "not json at all", "fx_graph", "miss", {}),
        ("fx_graph_cache_miss", None, "fx_graph", "miss", {}),
    ],
)
def test_cache_artifacts(name, payload, cache, result, extra):
    (ev,) = TraceConverter().convert(name, 1.0, artifact(name, 0, 0), payload)
    assert ev["kind"] == protocol.CACHE
    assert (ev["cache"], ev["result"]) == (cache, result)
    assert ev["compile_id"] == "0/0"
    for k, v in extra.items():
        assert ev[k] == pytest.approx(v) if isinstance(v, float) else ev[k] == v, k
    assert "cache_bypass_traceback" not in ev
    # the key's components travel as [attr, hash] pairs, their values left out
    assert all(len(pair) == 2 and ":" not in pair[0] for pair in ev.get("components", [])), ev
    assert len(ev.get("key", "")) <= 80
    assert len(protocol.encode(ev)) < 600


def test_graph_break_and_reasons_artifacts():
    conv = TraceConverter()
    (gb,) = conv.convert(
        "dynamo_graph_break_reason", 2.0, artifact("dynamo_graph_break_reason", 1, 0, "string"), BRANCH_PAYLOAD
    )
    assert gb["kind"] == protocol.GRAPH_BREAK
    assert gb["compile_id"] == "1/0" and gb["frame_id"] == 1 and gb["t"] == 2.0
    assert (gb["file"], gb["line"]) == ("s_gb.py", 8)
    (rr,) = conv.convert("recompile_reasons", 3.0, artifact("recompile_reasons", 0, 2), REASONS_LIST)
    assert rr["kind"] == protocol.RECOMPILE_REASONS and rr["compile_id"] == "0/2" and len(rr["reasons"]) == 3


def test_dynamo_error_and_autotune_and_unknown():
    conv = TraceConverter()
    (note,) = conv.convert("dynamo_error", 1.0, artifact("dynamo_error", 0, 0, "string"), "x" * 20_000)
    assert note["kind"] == protocol.NOTE and note["level"] == "error" and len(note["message"]) <= 8000
    kinfo = json.dumps(
        {
            "triton_poi_fused_add_0": {
                "autotune_cache_state": "miss",
                "num_warps": 4,
                "best_config": {"XBLOCK": 128},
                "junk": [1, 2],
            },
            "not_a_kernel": 5,
        }
    )
    (at,) = conv.convert("triton_kernel_info", 1.0, artifact("triton_kernel_info", 0, 0), kinfo)
    assert at["kind"] == protocol.AUTOTUNE
    (k,) = at["kernels"]
    assert k["name"] == "triton_poi_fused_add_0" and k["best_config"] == {"XBLOCK": 128} and "junk" not in k
    assert conv.convert("triton_kernel_info", 1.0, artifact("triton_kernel_info", 0, 0), "not json") == []
    assert conv.convert("some_new_record", 1.0, {"some_new_record": {}}, None) == []


def test_rank_is_carried():
    md = dict(artifact("fx_graph_cache_hit", 0, 0), rank=3)
    (ev,) = TraceConverter().convert("fx_graph_cache_hit", 1.0, md, FX_HIT)
    assert ev["rank"] == 3


def test_converted_recompile_limit_run_folds_into_the_store():
    """The captured limit run, end to end: trace records -> events -> store."""
    conv = TraceConverter()
    strs(conv, STRS_LIMIT)
    records = []
    for fcid in range(3):
        start = dict(START_LIMIT, frame_compile_id=fcid)
        if fcid:
            payload = (
                REASONS_ONE
                if fcid == 1
                else json.dumps(
                    [
                        f"0/{k}: tensor 'x' size mismatch at index 0. expected {k + 2}, actual {fcid + 2}"
                        for k in reversed(range(fcid))
                    ]
                )
            )
            records.append(("recompile_reasons", 10.0 + fcid, artifact("recompile_reasons", 0, fcid), payload))
        records.append(("dynamo_start", 10.0 + fcid, start, {"attr": None, "cfg": {"recompile_limit": 3}}))
        metrics = json.loads(json.dumps(METRICS_0_1))
        m = metrics["compilation_metrics"]
        m["compile_id"] = f"0/{fcid}"
        m["cache_size"] = fcid
        m["recompile_reason"] = None if fcid == 0 else f"0/{fcid - 1}: tensor 'x' size mismatch"
        metrics["frame_compile_id"] = fcid
        records.append(("compilation_metrics", 10.5 + fcid, metrics, {"cfg": {"recompile_limit": 3}}))
    records.append(("recompile_reasons", 13.0, artifact("recompile_reasons", 0, 3), REASONS_LIST))
    records.append(("compilation_metrics", 13.1, METRICS_0_3, {"cfg": {"recompile_limit": 3}}))
    events = convert_all(conv, records)
    s = Session()
    for ev in events:
        s.apply(protocol.decode(protocol.encode(ev)))
    assert s.bad_events == 0
    cs = s.compile
    assert list(cs.frames) == [0]
    f = cs.frames[0]
    assert f.title == "h" and f.limit_hit and len(f.compiles) == 4
    assert cs.compile_count == 4 and cs.recompile_count == 3 and cs.limit_hits == 1
    assert len(f.compiles[-1].guard_failures) == 3
    r = build_report(s)
    assert r["frames"][0]["limit_hit"] is True and r["compile"]["recompile_limit"] == 3


# ------------------------------------------------------------- TraceHandler


class _Channel:
    def __init__(self) -> None:
        self.disabled = False
        self.event_drops = 0
        self.put_calls: list[tuple] = []

    def put(self, record, urgent=False):
        self.put_calls.append((record, urgent))


def _record(md, payload=None) -> logging.LogRecord:
    rec = logging.LogRecord("torch.__trace", logging.DEBUG, __file__, 1, "", None, None)
    rec.metadata = md
    rec.payload = payload
    return rec


def test_trace_handler_keeps_only_what_ctmon_uses():
    ch = _Channel()
    h = TraceHandler(ch, attribute=lambda: {"module": "Net"})  # type: ignore[arg-type]
    h.handle(_record({"chromium_event": {}, "frame_id": 0}, "{}"))
    h.handle(_record({"describe_tensor": {"id": 0}}))
    h.handle(_record(artifact("fx_graph_runnable", 0, 0), "code"))
    h.handle(_record(artifact("torch_dynamo_resume_in_forward_at_7_ORIGINAL_BYTECODE", 0, 0), "..."))
    h.handle(_record({}))
    h.handle(_record("not a dict"))
    assert ch.put_calls == []
    h.handle(_record({"str": ["s_gb.py", 3]}))
    h.handle(_record(START_LIMIT))
    h.handle(_record(artifact("dynamo_graph_break_reason", 0, 0, "string"), ITEM_PAYLOAD))
    h.handle(_record(artifact("fx_graph_cache_hit", 0, 0), FX_HIT))
    h.handle(_record(METRICS_0_3))
    names = [(rec[1], urgent) for rec, urgent in ch.put_calls]
    assert names == [
        ("str", False),
        ("dynamo_start", True),
        ("dynamo_graph_break_reason", True),
        ("fx_graph_cache_hit", True),
        ("compilation_metrics", True),
    ]
    start = ch.put_calls[1][0]
    assert start[4]["attr"] == {"module": "Net"}
    gb = ch.put_calls[2][0]
    assert gb[4] == ITEM_PAYLOAD
    ch.disabled = True
    h.handle(_record(START_LIMIT))
    assert len(ch.put_calls) == 5


def test_trace_handler_never_raises_into_pytorch():
    ch = _Channel()

    def broken():
        raise RuntimeError("attribution failed")

    h = TraceHandler(ch, attribute=broken)  # type: ignore[arg-type]
    h.handle(_record(START_LIMIT))
    assert ch.event_drops == 1 and ch.put_calls == []
