"""Study specs; the shipped default (``digits.yaml``) is packaged as ``automl.default_studies``."""
