"""Card names → catalog ids (billing_rules/default/catalog.toml: RTX4090, A800-80G, H800-80G).

NVML names a card by its marketing name ("NVIDIA A800-SXM4-80GB", "NVIDIA GeForce RTX
4090"); the pipeline prices it by its catalog id. `ModelMap.catalog_id` tries, in order:
the name is already a catalog id (a trace may carry them), the operator's `--model-map`
file (JSON `{"<NVML name>": "<catalog id>"}`), then the built-in patterns below. A name
none of them knows maps to None: the agent then sends the card's own name (the worker
dead-letters the reading with its bytes, "unknown model", so that nothing is lost) and
counts it as an `unknown_model` fault.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from schemas.ids import is_id
from streams.agent.errors import AgentError

CATALOG_IDS = frozenset({"RTX4090", "A800-80G", "H800-80G"})

# (pattern on the upper-cased name, catalog id). The A800 comes with 40 GB too, which is not
# in the catalog: only an "80GB" name maps. The H800 was made with 80 GB only.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bRTX\s*4090\b(?!\s*D)"), "RTX4090"),  # not the 4090 D, a different card
    (re.compile(r"\bA800\b.*\b80\s*GB?\b"), "A800-80G"),
    (re.compile(r"\bH800\b"), "H800-80G"),
)


class ModelMap:
    """Maps the names cards give themselves to catalog ids."""

    def __init__(self, extra: dict[str, str] | None = None) -> None:
        self.extra = dict(extra or {})

    @classmethod
    def from_file(cls, path: Path | None) -> ModelMap:
        """The built-in map, plus the JSON object in `path` (name → catalog id) when given;
        AgentError naming the file when it is not such an object."""
        if path is None:
            return cls()
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise AgentError(f"--model-map {path}: cannot be read as JSON ({exc})") from exc
        if not isinstance(document, dict) or not all(isinstance(k, str) and is_id(v) for k, v in document.items()):
            raise AgentError(f'--model-map {path}: must be a JSON object {{"<card name>": "<catalog id>"}}')
        return cls(document)

    def catalog_id(self, name: str | None) -> str | None:
        """The catalog id of a card named `name`, or None when no rule knows it."""
        if not name:
            return None
        if name in CATALOG_IDS:
            return name
        if name in self.extra:
            return self.extra[name]
        upper = name.upper()
        for pattern, model in _PATTERNS:
            if pattern.search(upper):
                return model
        return None
