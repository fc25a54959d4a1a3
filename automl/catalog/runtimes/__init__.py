"""Latency backends, one file each (see :class:`automl.catalog.Backend`)."""
