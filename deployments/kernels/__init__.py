"""Faster replacements for MLX ops that are slow on MLX's CPU backend (never used on Metal).

`install_cpu_kernels()` puts them in place process-wide; call it before a model is built.
No Ray here; MLX is imported only when the kernels are used.
"""

from deployments.kernels.conv import install_cpu_kernels, uninstall_cpu_kernels

__all__ = ["install_cpu_kernels", "uninstall_cpu_kernels"]
