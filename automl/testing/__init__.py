"""Test suites that a new catalog entry is held to, shipped with the package (as
``optuna.testing`` ships its storages' suite): see :mod:`automl.testing.runtime_contract`."""
