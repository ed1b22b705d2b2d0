"""Ranks that go wrong without any collective to hang on: each rank compiles
a function and steps it; run under torchrun.

--import-error  rank 1 dies at import (a module its code needs is missing)
--exec          rank 1, after its steps, replaces itself with a program that
                is not Python (os.execv of /bin/sh), which runs on a moment
"""
import os
import sys

RANK = int(os.environ.get("RANK", "0"))
if "--import-error" in sys.argv and RANK == 1:
    import a_module_this_rank_lacks  # noqa: F401  RANK1-IMPORT

import torch

f = torch.compile(lambda t: (t * 2).sum(), backend="eager")
for _ in range(3):
    f(torch.ones(4))
print(f"rank {RANK} stepped", flush=True)
if "--exec" in sys.argv and RANK == 1:
    os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 2; echo rank 1 now a shell"])  # RANK1-EXEC
