"""A small help desk as an MCP server (official ``mcp`` SDK): assign, close, reprioritise.

Run it over stdio (``python helpdesk_mcp.py``), as ``examples/helpdesk_forge.py`` does, or over
streamable HTTP (``python helpdesk_mcp.py --http 8000``, endpoint ``/mcp``). Each MCP session
has its own desk. ``board`` (the whole state, as JSON) and ``load`` (replace the tickets) are
for a harness, not for the agent: ``ratchet forge`` hides them, reads the state with ``board``
and seeds each world with ``load``.
"""

import argparse
import json
from typing import Annotated, Literal

from mcp.server.fastmcp import Context, FastMCP
from pydantic import Field

TicketId = Annotated[str, Field(pattern=r"^T\d{2}$", description="The ticket's id, e.g. T04.")]
Person = Literal["ana", "ben", "chloe", "dev"]
Priority = Literal["low", "normal", "high"]

server = FastMCP("helpdesk")
desks: dict[int, dict[str, dict[str, str]]] = {}


def desk(ctx: Context) -> dict[str, dict[str, str]]:
    return desks.setdefault(id(ctx.session), {})


def ticket(ctx: Context, ticket_id: str) -> dict[str, str]:
    found = desk(ctx).get(ticket_id)
    if found is None:
        raise ValueError(f"there is no ticket {ticket_id}")
    return found


@server.tool()
def load(tickets: dict[str, dict[str, str]], ctx: Context) -> str:
    """Replace every ticket on the desk (setup only)."""
    desks[id(ctx.session)] = {k: dict(v) for k, v in tickets.items()}
    return "loaded"


@server.tool()
def board(ctx: Context) -> str:
    """Show every ticket with its status, priority and assignee (setup and checking only)."""
    return json.dumps(desk(ctx), sort_keys=True)


@server.tool()
def status_of(ticket_id: TicketId, ctx: Context) -> str:
    """Say whether a ticket is open or closed."""
    return ticket(ctx, ticket_id)["status"]


@server.tool()
def priority_of(ticket_id: TicketId, ctx: Context) -> str:
    """Say a ticket's priority."""
    return ticket(ctx, ticket_id)["priority"]


@server.tool()
def assignee_of(ticket_id: TicketId, ctx: Context) -> str:
    """Say who a ticket is assigned to ("nobody" if no one)."""
    return ticket(ctx, ticket_id)["assignee"]


@server.tool()
def assign(ticket_id: TicketId, person: Person, ctx: Context) -> str:
    """Assign an open ticket to a person."""
    found = ticket(ctx, ticket_id)
    if found["status"] != "open":
        raise ValueError(f"ticket {ticket_id} is closed; reopen it first")
    if found["assignee"] == person:
        raise ValueError(f"ticket {ticket_id} is already assigned to {person}")
    found["assignee"] = person
    return f"Ticket {ticket_id} is assigned to {person}."


@server.tool()
def close_ticket(ticket_id: TicketId, ctx: Context) -> str:
    """Close an open ticket."""
    found = ticket(ctx, ticket_id)
    if found["status"] == "closed":
        raise ValueError(f"ticket {ticket_id} is already closed")
    found["status"] = "closed"
    return f"Ticket {ticket_id} is closed."


@server.tool()
def reopen_ticket(ticket_id: TicketId, ctx: Context) -> str:
    """Reopen a closed ticket."""
    found = ticket(ctx, ticket_id)
    if found["status"] == "open":
        raise ValueError(f"ticket {ticket_id} is already open")
    found["status"] = "open"
    return f"Ticket {ticket_id} is open again."


@server.tool()
def set_priority(ticket_id: TicketId, priority: Priority, ctx: Context) -> str:
    """Change a ticket's priority."""
    found = ticket(ctx, ticket_id)
    if found["priority"] == priority:
        raise ValueError(f"ticket {ticket_id} already has {priority} priority")
    found["priority"] = priority
    return f"Ticket {ticket_id} now has {priority} priority."


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    port = parser.parse_args().http
    if port is None:
        server.run("stdio")
    else:
        server.settings.port = port
        server.run("streamable-http")
