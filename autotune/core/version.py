"""The package's version, in a leaf module so that any stage can name it without importing the package's
public names (``autotune/__init__.py`` imports the serving stage)."""

__version__ = "0.1.0"
