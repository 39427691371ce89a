"""Kernel side of jupyter-suspend (runs inside user kernels: keep imports cheap)."""
