"""reachlens' version (one place: the package and every run record read it here)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
