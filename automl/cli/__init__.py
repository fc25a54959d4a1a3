"""The ``automl`` command: ``main`` (this package's :mod:`~automl.cli.main`), ``automl study …``
(:mod:`~automl.cli.study`), and what they share (:mod:`~automl.cli.common`)."""

from automl.cli.main import app, main

__all__ = ["app", "main"]
