"""One trial: the Optuna objective, the trial's stages with their cache, and its records."""
