"""PyTorch's pages the advice links to where it says what is known rather than
a fix proven on a workload."""

CACHING_PAGE = "https://pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html"
REGIONAL_PAGE = "https://pytorch.org/tutorials/recipes/regional_compilation.html"
TUNING_PAGE = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
TROUBLESHOOTING_PAGE = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html"
