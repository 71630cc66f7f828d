"""The generated workspace: logs, CSV tables, JSON and INI configs and notes in nested folders.

:func:`generate` is a pure function of ``(seed, size)``: the same arguments always give the same
files, so tasks can carry just the seed and the verifier can rebuild the starting state.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

SERVICES = ("auth", "billing", "search", "gateway", "mailer", "orders", "reports", "uploads")
CITIES = ("Lisbon", "Oslo", "Quito", "Nairobi", "Osaka", "Lima", "Perth", "Tunis", "Riga")
PEOPLE = (
    "Ada", "Bruno", "Chloe", "Dmitri", "Elif", "Farah", "Goran", "Hiro", "Ines", "Jonas",
    "Kemal", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
TOPICS = ("roadmap", "meeting", "retro", "ideas", "oncall", "budget", "hiring")
LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
MESSAGES = (
    "request served",
    "cache refreshed",
    "connection pool resized",
    "slow query detected",
    "user session expired",
    "retrying upstream call",
    "config reloaded",
)


@dataclass(frozen=True)
class Workspace:
    """A generated workspace.

    Attributes:
        files: Relative path to text content, for every file.
        error_codes: Error code to the log file that contains it (each code is in one file).
    """

    files: dict[str, str]
    error_codes: dict[str, str]

    def paths(self, prefix: str = "", suffix: str = "") -> list[str]:
        """Return the sorted paths that start with ``prefix`` and end with ``suffix``."""
        return sorted(p for p in self.files if p.startswith(prefix) and p.endswith(suffix))


def generate(seed: int, size: int) -> Workspace:
    """Build the workspace for ``seed``; ``size`` (1..5) scales the number of files and lines."""
    rng = random.Random(seed)
    files: dict[str, str] = {}
    error_codes: dict[str, str] = {}
    services = rng.sample(SERVICES, 2 + size)
    codes = iter(rng.sample(range(1000, 10000), 64))
    month, first_day = rng.randint(1, 12), rng.randint(1, 20)
    for index, service in enumerate(services):
        date = f"2024-{month:02d}-{first_day + index:02d}"
        path = f"logs/{service}-{date}.log"
        lines = []
        for line_no in range(6 + 3 * size):
            level = rng.choice(LEVELS)
            stamp = f"{date} {rng.randint(0, 23):02d}:{line_no:02d}:00"
            message = rng.choice(MESSAGES)
            if level == "ERROR":
                code = f"E{next(codes)}"
                error_codes[code] = path
                message = f"{message} (code {code})"
            lines.append(f"{stamp} {level} {service}: {message}")
        files[path] = "\n".join(lines) + "\n"
    for service in services:
        config = {
            "service": service,
            "port": 8000 + rng.randint(0, 999),
            "debug": rng.random() < 0.5,
            "replicas": rng.randint(1, 6),
        }
        files[f"config/{service}.json"] = json.dumps(config, indent=2) + "\n"
    for service in services[: 1 + size // 2]:
        files[f"config/{service}.ini"] = _ini(rng, service)
    for table in rng.sample(("customers", "orders", "payments", "visits"), 1 + size // 2):
        files[f"data/{table}.csv"] = _csv(rng, 4 + 2 * size)
    for year in rng.sample(("2022", "2023", "2024"), 1 + size // 3):
        for topic in rng.sample(TOPICS, 1 + size // 2):
            body = " ".join(rng.choice(MESSAGES) for _ in range(3))
            files[f"notes/{year}/{topic}.txt"] = f"{topic} notes {year}: {body}.\n"
    for index in range(1 + size // 2):
        folder = rng.choice(("", "cache/", "notes/"))
        files[f"{folder}scratch-{index + 1}.tmp"] = f"temporary {rng.randint(100, 999)}\n"
    return Workspace(files, error_codes)


def _ini(rng: random.Random, service: str) -> str:
    return (
        f"[server]\nhost = {service}.internal\nport = {9000 + rng.randint(0, 999)}\n"
        f"workers = {rng.randint(2, 16)}\n\n"
        f"[database]\nname = {service}_db\nuser = {service}_{rng.randint(10, 99)}\n"
        f"timeout = {rng.choice((5, 10, 30, 60))}\n"
    )


def _csv(rng: random.Random, rows: int) -> str:
    lines = ["id,name,city,amount"]
    for row_id in range(1, rows + 1):
        name, city = rng.choice(PEOPLE), rng.choice(CITIES)
        lines.append(f"{row_id},{name},{city},{rng.randint(5, 500)}")
    return "\n".join(lines) + "\n"


def csv_rows(text: str) -> list[dict[str, str]]:
    """Parse one of the generated CSV tables (no quoting) into row dicts."""
    header, *rows = text.strip().split("\n")
    keys = header.split(",")
    return [dict(zip(keys, row.split(","), strict=True)) for row in rows]


def config_values(workspace: Workspace) -> dict[str, dict[str, str]]:
    """Return every config file's values: path to key to value as text.

    JSON keys are read as they are (``port``); INI keys are named ``section.key``
    (``server.port``). Values are written as ``read_value`` shows them: JSON as JSON text
    (``true``, ``8042``, ``auth``), INI values as they appear after the ``=``.
    """
    values: dict[str, dict[str, str]] = {}
    for path in workspace.paths("config/", ".json"):
        values[path] = json_values(workspace.files[path])
    for path in workspace.paths("config/", ".ini"):
        values[path] = ini_values(workspace.files[path])
    return values


def ini_values(text: str) -> dict[str, str]:
    """Return the ``section.key`` values of an INI file's text."""
    found: dict[str, str] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("[") and line.rstrip().endswith("]"):
            section = line.strip().strip("[]")
        elif "=" in line and section:
            key, value = line.split("=", 1)
            found[f"{section}.{key.strip()}"] = value.strip()
    return found


def json_values(text: str) -> dict[str, str]:
    """Return the top-level values of a JSON object's text (strings bare, others as JSON).

    Raises:
        ValueError: If the text is not a JSON object.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the JSON text does not hold an object")
    return {key: v if isinstance(v, str) else json.dumps(v) for key, v in data.items()}
