"""Who runs trials: the scheduler of studies, the study loop, and local worker processes."""
