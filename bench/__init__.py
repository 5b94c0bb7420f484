"""The benchmark harness (`python -m bench`): see the README's Performance section."""

# Chooses MLX's CPU BLAS before any benchmark imports mlx (deployments/blas.py), so the
# in-process engine multiplies with the same library as the graph's replicas.
from deployments import blas as _blas

_blas.select()
