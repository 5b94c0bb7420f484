"""Faster replacements for MLX ops that are slow on MLX's CPU backend (never used on Metal).

`install_cpu_kernels()` puts the convolutions in place process-wide; call it before a model is
built. Kokoro's fused kernels (`deployments.kernels.kokoro`) are installed by its model hook.
`OMINIX_CPU_KERNELS` (all, none, or a comma list) switches them.
No Ray here; MLX is imported only when the kernels are used.
"""

from deployments.kernels.conv import install_cpu_kernels, is_enabled, uninstall_cpu_kernels

__all__ = ["install_cpu_kernels", "is_enabled", "uninstall_cpu_kernels"]
