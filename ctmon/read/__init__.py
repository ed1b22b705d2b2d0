"""Every way bytes or files become a Session: recordings, live sockets, follow, merge, PyTorch's TORCH_TRACE."""
