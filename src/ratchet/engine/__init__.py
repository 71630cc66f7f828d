"""The engine: model backends, the episode loop, rollouts, the store, metrics and export."""
