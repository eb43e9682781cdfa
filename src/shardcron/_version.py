"""The release number: the single source read by the package metadata and ``--version``."""

__version__ = "0.1.0"
