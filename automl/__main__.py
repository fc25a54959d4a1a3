"""``python -m automl`` runs the CLI."""

from automl.cli import main

main()
