"""A tiny object source for forge tests: jars on a shelf that can be filled, emptied, painted."""

import random
from typing import Annotated, Literal

from pydantic import Field

from ratchet import ToolError
from ratchet.forge import object_source

JarId = Annotated[str, Field(pattern=r"^J\d$")]
Colour = Literal["red", "green", "blue"]
JARS = [f"J{i}" for i in range(1, 7)]


def seed(rng: random.Random) -> dict:
    return {
        jar: {"colour": rng.choice(["red", "green", "blue"]), "full": rng.random() < 0.5}
        for jar in JARS
    }


def tools(shelf: dict) -> list:
    def jar(jar_id: str) -> dict:
        if jar_id not in shelf:
            raise ToolError(f"no jar {jar_id}")
        return shelf[jar_id]

    def colour_of(jar_id: JarId) -> str:
        """Say a jar's colour.

        Args:
            jar_id: The jar, e.g. J2.
        """
        return jar(jar_id)["colour"]

    def is_full(jar_id: JarId) -> str:
        """Say whether a jar is full or empty.

        Args:
            jar_id: The jar, e.g. J2.
        """
        return "full" if jar(jar_id)["full"] else "empty"

    def fill(jar_id: JarId) -> str:
        """Fill an empty jar.

        Args:
            jar_id: The jar, e.g. J2.
        """
        if jar(jar_id)["full"]:
            raise ToolError(f"{jar_id} is already full")
        shelf[jar_id]["full"] = True
        return f"{jar_id} is full"

    def empty(jar_id: JarId) -> str:
        """Empty a full jar.

        Args:
            jar_id: The jar, e.g. J2.
        """
        if not jar(jar_id)["full"]:
            raise ToolError(f"{jar_id} is already empty")
        shelf[jar_id]["full"] = False
        return f"{jar_id} is empty"

    def paint(jar_id: JarId, colour: Colour) -> str:
        """Paint a jar.

        Args:
            jar_id: The jar, e.g. J2.
            colour: The new colour.
        """
        if jar(jar_id)["colour"] == colour:
            raise ToolError(f"{jar_id} is already {colour}")
        shelf[jar_id]["colour"] = colour
        return f"{jar_id} is {colour}"

    return [colour_of, is_full, fill, empty, paint]


jars = object_source(
    name="forge/jars",
    description="Jars on a shelf.",
    seed=seed,
    tools=tools,
    worlds=4,
    values={"jar_id": JARS},
    templates={
        "paint": "Paint jar {jar_id} {colour}.",
        "colour_of": "What colour is jar {jar_id}?",
    },
)


def leaky_tools(shelf: dict) -> list:
    """Tools whose schema lists the jars this shelf holds: a leak forge must refuse."""
    held = Literal[tuple(sorted(j for j, v in shelf.items() if v["full"]))]  # type: ignore[valid-type]

    def top_up(jar_id: held) -> str:  # type: ignore[valid-type]
        """Top up a full jar.

        Args:
            jar_id: The jar.
        """
        return "ok"

    return [top_up, *tools(shelf)]


leaky = object_source(
    name="forge/leaky", description="Leaky jars.", seed=seed, tools=leaky_tools, worlds=4
)
