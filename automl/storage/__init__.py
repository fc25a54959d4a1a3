"""Where studies live: the storage factory, the RDB storage with heartbeats, the trial cache,
the artifact store and the idempotency claims. Nothing here imports trials or pipeline."""
