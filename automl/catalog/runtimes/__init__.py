"""The runtimes, one file each, on the contract of :class:`automl.catalog.Backend` (``_base.py``)."""
