"""automl: hardware-aware model-optimization search."""

__version__ = "0.1.0"
