"""Pipeline stages: one module and one entry function each, with no Optuna inside."""
