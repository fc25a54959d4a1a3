"""What to search: the study spec, the search space, and the samplers that walk it."""
