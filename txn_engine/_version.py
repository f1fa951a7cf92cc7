"""The library's version (one place; the package, the manifest's writer_version and the CLI
read it from here)."""

__version__ = "0.1.0"
