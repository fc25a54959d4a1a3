"""What the CLI and the API call: create, stop and state of studies, the one read path,
exports, comparisons and re-measurement."""
