"""Adapters between Ratchet and the ecosystem's env, tool and trainer formats.

In (outside things become Ratchet envs and tools):

- :mod:`~ratchet.adapters.dataset`: rows or a Hugging Face ``datasets`` dataset with a question
  and an answer column, with the dataset's own splits;
- :mod:`~ratchet.adapters.mcp`: the tools of any MCP server (stdio or streamable HTTP);
- :mod:`~ratchet.adapters.openenv`: any OpenEnv environment server (WebSocket sessions);
- :mod:`~ratchet.adapters.harbor`: Harbor task directories, run in Ratchet's sandbox.

Out (Ratchet envs for other trainers):

- :mod:`~ratchet.adapters.trl`: any env as a TRL ``environment_factory`` class;
- :mod:`~ratchet.adapters.openenv_server`: any env as an OpenEnv server.

Each module imports its heavy dependency (``mcp``, ``websockets``, ``openenv``, ``trl``) only
when used; install them with ``pip install 'ratchet[adapters]'``.
"""
