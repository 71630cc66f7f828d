"""Built-in environment suites, one package each (registered in :mod:`ratchet.envs.registry`)."""
