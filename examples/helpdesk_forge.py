"""A help desk's MCP server as a forge source: `ratchet forge` makes an env from its tools.

The server (``servers/helpdesk_mcp.py``, official ``mcp`` SDK) has seven tools for the agent,
``board`` (its state as JSON) and ``load`` (seed data). `ratchet forge` loads each seeded
world through ``load``, walks the agent's tools at random, and verifies a task by comparing
``board`` after the episode with ``board`` after the walk's replay:

    ratchet forge examples/helpdesk_forge.py:source --out forged/helpdesk
    ratchet check forged/helpdesk/env.py:env
"""

import random
import sys
from pathlib import Path

from ratchet.forge import mcp_source
from ratchet.integrations.mcp import StdioServer

SERVER = Path(__file__).parent / "servers" / "helpdesk_mcp.py"
TICKETS = [f"T{i:02d}" for i in range(1, 13)]
PEOPLE = ["ana", "ben", "chloe", "dev"]


def seed(rng: random.Random) -> dict:
    """The ``load`` tool's arguments for one world: twelve tickets in random states."""
    tickets = {
        ticket: {
            "status": rng.choice(["open", "open", "closed"]),
            "priority": rng.choice(["low", "normal", "high"]),
            "assignee": rng.choice([*PEOPLE, "nobody"]),
        }
        for ticket in TICKETS
    }
    return {"tickets": tickets}


source = mcp_source(
    StdioServer(sys.executable, [str(SERVER)]),
    name="forge/helpdesk",
    description="A help desk behind an MCP server: assign, close, reopen and reprioritise tickets.",
    state_tool="board",
    load_tool="load",
    seed=seed,
    worlds=8,
    values={"ticket_id": TICKETS},
    templates={
        "assign": "Assign ticket {ticket_id} to {person}.",
        "close_ticket": "Close ticket {ticket_id}.",
        "reopen_ticket": "Reopen ticket {ticket_id}.",
        "set_priority": "Give ticket {ticket_id} {priority} priority.",
        "status_of": "Is ticket {ticket_id} open or closed?",
        "priority_of": "What priority does ticket {ticket_id} have?",
        "assignee_of": "Who is ticket {ticket_id} assigned to?",
    },
)
