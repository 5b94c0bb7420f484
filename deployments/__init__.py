"""ominix-serve: everything that runs inside a Ray Serve deployment of the graph."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ominix-serve")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

SERVICE_NAME = "ominix-serve"

# Before any module of the package can import mlx: MLX's Linux wheel would otherwise bind its
# matrix products to the slow reference BLAS it bundles (see deployments/blas.py).
from deployments import blas as _blas  # noqa: E402

_blas.select()
