"""The shipped search spaces, packaged as ``automl.search_spaces``: one YAML file each."""
