"""``ratchet forge``: practice grounds from what a user already has.

Two routes, one validation: the procedural route turns typed tool functions over a world with
readable state (a :func:`sqlite_source`, an :func:`object_source`, an :func:`mcp_source`) into
tasks by seeded random walks, verified by replaying the walk and comparing states
(:func:`forge_tools`); the spec route has a model write an env module from a plain-language
spec, run in the sandbox, repaired from its check report (:func:`forge_spec`). Either way the
env is written only after it passes ``ratchet check``, as a directory any command takes as
``DIR/env.py:env`` (:func:`load_forged`), versioned by the hash of its pinned content. See
``docs/envs.md``.
"""

from ratchet.forge.author import forge_spec
from ratchet.forge.config import ForgeConfig
from ratchet.forge.package import Forged, ForgeRefused, load_forged
from ratchet.forge.procedural import forge_tools
from ratchet.forge.source import Source, mcp_source, object_source, sqlite_source

__all__ = [
    "ForgeConfig",
    "ForgeRefused",
    "Forged",
    "Source",
    "forge_spec",
    "forge_tools",
    "load_forged",
    "mcp_source",
    "object_source",
    "sqlite_source",
]
