"""A tiny MCP server: a stock room with add, remove and stock tools (official ``mcp`` SDK).

Run it over stdio (``python stockroom_mcp.py``), as ``examples/mcp_env.py`` does, or over
streamable HTTP (``python stockroom_mcp.py --http 8000``, endpoint ``/mcp``). Each MCP session has
its own stock room, so HTTP clients do not see each other's. ``reset`` is meant for the env's
setup, not for the agent (``mcp_env`` hides it).
"""

import argparse
import json

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("stockroom")
rooms: dict[int, dict[str, int]] = {}


def room(ctx: Context) -> dict[str, int]:
    return rooms.setdefault(id(ctx.session), {})


@server.tool()
def reset(items: dict[str, int], ctx: Context) -> str:
    """Empty the stock room and fill it with the given items (setup only)."""
    rooms[id(ctx.session)] = dict(items)
    return "reset"


@server.tool()
def stock(ctx: Context) -> str:
    """Show how many of each item the stock room holds."""
    return json.dumps(room(ctx), sort_keys=True)


@server.tool()
def add(item: str, amount: int, ctx: Context) -> str:
    """Put items into the stock room.

    Args:
        item: The item's name, e.g. "apples".
        amount: How many to add (at least 1).
    """
    if amount < 1:
        raise ValueError("amount must be at least 1")
    held = room(ctx)
    held[item] = held.get(item, 0) + amount
    return f"{item}: {held[item]}"


@server.tool()
def remove(item: str, amount: int, ctx: Context) -> str:
    """Take items out of the stock room.

    Args:
        item: The item's name, e.g. "apples".
        amount: How many to take (at least 1, at most what is there).
    """
    held = room(ctx)
    if amount < 1 or amount > held.get(item, 0):
        raise ValueError(f"cannot remove {amount} {item}: there are {held.get(item, 0)}")
    held[item] -= amount
    return f"{item}: {held[item]}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    port = parser.parse_args().http
    if port is None:
        server.run("stdio")
    else:
        server.settings.port = port
        server.run("streamable-http")
