"""Training-time machinery: generation backends and the helpers that make their output a complete batch."""
