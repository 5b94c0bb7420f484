"""The benchmark harness (`python -m bench`): see docs/performance.md."""

# Every system multiplies with the same BLAS and the same number of BLAS threads: the cores
# the process may run on, as in a graph replica (deployments/blas.py sets OPENBLAS_NUM_THREADS
# when it is unset; the Ray cluster, the in-process engine and the peer server inherit it).
# Set OPENBLAS_NUM_THREADS to compare at another count.
# Chosen before any benchmark imports mlx (deployments/blas.py); the peer server is given the
# same library through LD_PRELOAD (deployments.blas.subprocess_env).
from deployments import blas as _blas  # noqa: E402

_blas.select()
