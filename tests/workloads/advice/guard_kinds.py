"""One compiled function per guard kind, each recompiling on its own;
--fix makes the change each finding's advice names, in the code.

  rank       a tensor flattened on some calls          -> the same shape (view) every call
  stride     a transposed view                         -> .contiguous() before the call
  dispatch   inputs made under torch.inference_mode()  -> made under torch.no_grad()
  grad_mode  evaluation calls under torch.no_grad()    -> those calls on the uncompiled function
  autocast   some calls under torch.autocast           -> every call under it
  determ     use_deterministic_algorithms toggled       -> set once at start-up
  dtype      torch.set_default_dtype toggled           -> set once at start-up
  length     a list of tensors whose length changes    -> padded to one length, stacked
  container  a dict value that changes                 -> the value passed as a tensor
  flag       a str argument that flips                 -> the branch outside the compiled function
  identity   one of two functions passed as argument   -> one function, what differs as a tensor
  type       an nn.Parameter on some calls             -> .detach() on every call
  problem    transformers' config.problem_type, set by its first call with labels (when transformers is
             installed)                                -> set before compiling

--steps: loop length.
"""

import argparse

import torch

try:
    import transformers
except ImportError:  # the problem_type case needs it; the others do not
    transformers = None

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()
FIX = args.fix
torch.manual_seed(0)


def rank(x):
    return x * 2  # GUARD:rank


def stride(x):
    return x * 2 + 1  # GUARD:stride


def dispatch(x):
    return x.relu() + 1  # GUARD:dispatch


def grad_mode(x, w):
    return (x @ w).tanh()  # GUARD:grad_mode


def autocast(x, w):
    return x @ w  # GUARD:autocast


def determ(x):
    return x.cumsum(0)  # GUARD:determ


def default_dtype(x):
    return x + torch.ones(3)  # GUARD:default_dtype


def length(xs):
    return sum(x.sum() for x in xs)  # GUARD:length


def length_fixed(xs):
    return xs.sum()


def container(x, cfg):
    return x * cfg["scale"]  # GUARD:container


def flag(x, how):
    return x.sum() if how == "sum" else x.mean()  # GUARD:flag


def total(x):
    return x.sum()


def identity(x, fn):
    return fn(x) + 1  # GUARD:identity


def double(t):
    return t * 2


def triple(t):
    return t * 3


def scaled(t, k):
    return t * k


def typed(x, b):
    return x * b  # GUARD:type


def c(f):
    return torch.compile(f, backend="eager")


rank_c, stride_c, dispatch_c = c(rank), c(stride), c(dispatch)
grad_mode_c, autocast_c, container_c, typed_c = c(grad_mode), c(autocast), c(container), c(typed)
determ_c, default_dtype_c = c(determ), c(default_dtype)
length_c = c(length_fixed if FIX else length)
flag_c = c(total if FIX else flag)
identity_c = c(scaled if FIX else identity)
w = torch.nn.Parameter(torch.randn(3, 3))
bias = torch.nn.Parameter(torch.randn(3))
for i in range(args.steps):
    odd = i % 2 == 1
    x = torch.randn(4, 3)
    flat = x.reshape(-1)
    rank_c(flat.view(4, 3) if FIX else (flat if odd else x))
    stride_c(x.t().contiguous() if FIX else (x.t() if odd else x.t().contiguous()))
    with torch.no_grad() if FIX else torch.inference_mode():
        made = torch.randn(4, 3)
    dispatch_c(made if odd else x)
    grad_mode_c(x, w)
    with torch.no_grad():
        (grad_mode if FIX else grad_mode_c)(x, w)  # evaluation
    xs = [torch.randn(3) for _ in range(2 + i % 2)]
    length_c(torch.stack(xs + [torch.zeros(3)] * (3 - len(xs)))) if FIX else length_c(xs)
    scale = 1.0 + i
    container_c(x, {"scale": torch.tensor(scale)} if FIX else {"scale": scale})
    how = "sum" if odd else "mean"
    (flag_c(x) if how == "sum" else flag_c(x) / x.numel()) if FIX else flag_c(x, how)
    identity_c(x, torch.tensor(3.0 if odd else 2.0)) if FIX else identity_c(x, triple if odd else double)
    typed_c(x, bias.detach() if FIX or not odd else bias)

# global state every compiled function sees: one function called while each changes
for i in range(args.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=FIX or i % 2 == 1):
        autocast_c(torch.randn(4, 3), w)
if FIX:
    torch.use_deterministic_algorithms(True)
for i in range(args.steps):
    if not FIX:
        torch.use_deterministic_algorithms(i % 2 == 1)
    determ_c(torch.randn(4, 3))
torch.use_deterministic_algorithms(False)
for i in range(args.steps):
    if not FIX:
        torch.set_default_dtype(torch.float64 if i % 2 else torch.float32)
    default_dtype_c(torch.randn(4, 3))
torch.set_default_dtype(torch.float32)

if transformers is not None:
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, num_labels=3
    )
    if FIX:
        config.problem_type = "single_label_classification"
    model = transformers.BertForSequenceClassification(config)
    model_c = torch.compile(model, backend="eager")
    for _ in range(2):
        model_c(input_ids=torch.randint(0, 50, (2, 8)), labels=torch.tensor([0, 2]))  # GUARD:problem
print("ok")
