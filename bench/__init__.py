"""The benchmark harness (`python -m bench`): see docs/performance.md."""

import os

# Every system multiplies with the same BLAS and the same number of BLAS threads: a graph
# replica gets one (Ray sets OMP_NUM_THREADS=1 for a replica with under one CPU), so the
# in-process engine and the peer server get one too, unless the caller sets another count.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Chosen before any benchmark imports mlx (deployments/blas.py); the peer server is given the
# same library through LD_PRELOAD (deployments.blas.subprocess_env).
from deployments import blas as _blas  # noqa: E402

_blas.select()
