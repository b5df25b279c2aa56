"""Conversion between the versions of the parent kind: :class:`ConversionError`.

A reconciler that defines ``convert(objects, desired_api_version)`` serves
its CRD's conversion webhook (``world = "reconciler-with-conversion"`` or
``"reconciler-with-admission-and-conversion"`` in ``operon.toml``).
"""

from __future__ import annotations


class ConversionError(Exception):
    """Raise from ``convert`` to refuse the whole request; the API server shows
    ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = str(message)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.message == self.message  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.message)

    def __repr__(self) -> str:
        return f"ConversionError({self.message!r})"
