"""Model families, one file each (see :class:`automl.catalog.Family`)."""
