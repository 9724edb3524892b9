"""torch-matrix: run the same PyTorch workloads on two torch pins and decide whether to adopt."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("torch-matrix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
