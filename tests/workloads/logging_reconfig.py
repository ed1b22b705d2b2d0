"""A job whose own logging set-up switches PyTorch's trace logger off between
compiles. argv[1]: how -- "dictconfig" (logging.config.dictConfig with its
default disable_existing_loggers=True), "clear" (every handler removed) or
"torch_logger" (dictConfig giving the "torch" logger a stdout handler, which
resets its children: handlers cleared, propagate on).

Three compiles of one function (sizes 4, 8, 16, dynamic=False): the first
before the reconfiguration, the second straight after it (before any other
thread can run: the switch interval is raised), the third after a pause."""

import logging
import logging.config
import sys
import time

import torch


def scale(x):
    return x * 2 + 1


def main() -> None:
    how = sys.argv[1]
    f = torch.compile(scale, backend="eager", dynamic=False)
    f(torch.ones(4))
    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)  # no other thread runs until this one blocks
    if how == "dictconfig":
        logging.config.dictConfig({"version": 1, "root": {"level": "WARNING"}})
    elif how == "clear":
        logging.getLogger("torch.__trace").handlers.clear()
    else:
        logging.config.dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"f": {"format": "LOG %(name)s %(message)s"}},
            "handlers": {"out": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "f"}},
            "loggers": {"torch": {"handlers": ["out"], "level": "DEBUG"}},
        })
    f(torch.ones(8))
    sys.setswitchinterval(old)
    time.sleep(0.5)
    f(torch.ones(16))
    print("done", flush=True)


if __name__ == "__main__":
    main()
