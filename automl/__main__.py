"""``python -m automl`` runs the CLI."""

from __future__ import annotations

try:
    from automl.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: nothing has started
    raise SystemExit(130) from None

main()
