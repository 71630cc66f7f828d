"""``ratchet serve``: an agent version behind an OpenAI-compatible API, recording its traffic.

An application gets the improved agent by changing its base URL: the server applies the
agent's memory to every incoming conversation the way the harness does in episodes
(:mod:`ratchet.serve.conversations`), decodes with the agent's backend (batched across concurrent
requests for a local model, constrained to valid tool calls), records each conversation in a
store as an unverified trajectory and attaches a verdict when the application reports one
(:mod:`ratchet.serve.recorder`); ``ratchet improve --experience STORE`` learns from it.
The HTTP layer (FastAPI, behind the ``serve`` extra) is :mod:`ratchet.serve.app`.
"""

from ratchet.serve.config import ServeConfig

__all__ = ["ServeConfig"]
