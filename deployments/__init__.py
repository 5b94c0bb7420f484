"""ominix-serve: everything that runs inside a Ray Serve deployment of the graph."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ominix-serve")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

SERVICE_NAME = "ominix-serve"
