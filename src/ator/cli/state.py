"""What the CLI remembers between runs (layer: cli; imports the standard library only).

`ator demo` and `ator chat` keep the ids of the org, setups and thread they made in a small
JSON file in the data dir, so a second run reuses them instead of piling up new ones. Ids are
remembered per database (the URL without its password): the same data dir pointed at another
database starts afresh. Callers check a remembered id still exists before using it; this file
is a cache, the database stays the truth.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["CliState"]

_FILE = "cli-state.json"


class CliState:
    """The remembered ids for one database, read at open and written by `save`."""

    def __init__(self, data_dir: Path, database: str) -> None:
        self.path = data_dir / _FILE
        self.database = database
        self._all = self._read()
        entry = self._all.setdefault(database, {})
        self.data: dict[str, Any] = entry if isinstance(entry, dict) else {}

    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged cache is rebuilt: everything in it can be found or made again.
            return {}
        return raw if isinstance(raw, dict) else {}

    def get(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None

    def set(self, key: str, value: str | None) -> None:
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def save(self) -> None:
        """Write atomically (temp file + rename), so two commands never leave half a file."""
        self._all[self.database] = self.data
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._all, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)
