"""Step (1) of rating a batch, shared by both raters: which readings of a message are valid.

The fast path (`QuickParser`, or the Rust core's own) takes the plainly valid single
reading; the definition (`schemas.events.parse_reading`) judges every other message,
batched ones element by element, and each refusal becomes a dead letter with its reason.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import InvalidReading
from schemas.events import parse_reading, split_message
from schemas.quick_parser import QuickParser
from schemas.topics import KIND_OF_TOPIC
from streams.deadletters import DeadLetter, refused
from streams.kafka.message import Message
from streams.rating.protocol import Lookup


def validate_message(message: Message, quick: QuickParser, known_sites, known_models, now_s: int,
                     deadletters: list[DeadLetter]) -> list[tuple]:
    """The valid readings of one message as (reading, message, bytes of the reading, element
    index: 0 for a single reading); each refused one, or the whole message, becomes a dead letter."""
    value, expect = message.value, KIND_OF_TOPIC.get(message.topic)
    if value is None:
        deadletters.append(DeadLetter(message, "empty message (no value)"))
        return []
    # The fast path takes the plainly valid single reading; the definition judges the rest.
    reading = quick(value, now_s, expect) if value[:1] == b"{" else None
    if reading is not None:
        return [(reading, message, value, 0)]
    try:
        elements = split_message(value)
    except InvalidReading as exc:
        deadletters.append(DeadLetter(message, str(exc)))
        return []
    batched = elements is not None  # a batch: each element stands or falls alone
    accepted = []
    for index, element in enumerate(elements if batched else [value], start=1):
        try:
            reading = (quick(element, now_s, expect) if batched else None) or parse_reading(
                element, known_sites=known_sites, known_models=known_models, now_s=now_s, expect_kind=expect
            )
        except InvalidReading as exc:
            deadletters.append(refused(message, element, index if batched else 0, str(exc)))
            continue
        accepted.append((reading, message, element, index if batched else 0))
    return accepted


def check_cards(rater: Any, lookup: Lookup, readings: list | None = None) -> None:
    """Ask ClickHouse, once per card, whether it holds readings of it (see
    Rater.unchecked_cards); a look-up without `stored_since` (a test's fake) skips this."""
    stored_since = getattr(lookup, "stored_since", None)
    if stored_since is None:
        return
    unchecked = rater.unchecked_cards(readings) if readings is not None else rater.unchecked_cards()
    if any(unchecked.values()):
        rater.mark_checked(unchecked, stored_since(unchecked))
