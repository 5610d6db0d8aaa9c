"""Errors of the event schemas.

    SchemaError           base
    └── InvalidReading    a reading that breaks SPEC §3; its message is the dead-letter reason
"""


class SchemaError(Exception):
    """Base of the errors raised by `schemas`."""


class InvalidReading(SchemaError):
    """Raised by `parse_reading` when bytes are not a valid v1 reading; str() is the reason."""
