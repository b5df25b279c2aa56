"""Why a reconcile produced no outcome: raise :class:`Transient` or :class:`Terminal`."""

from __future__ import annotations

from typing import Any

from .typed import to_json


class Failure(Exception):
    """Why a reconcile produced no outcome. Nothing of the reconcile is written.

    Raise one of the two subclasses from ``reconcile``:

    - :class:`Transient`: may succeed later (a dependency is not ready). The
      host retries with per-object exponential backoff (5 ms doubling up to
      1000 s); ``request.attempt`` counts the failures in a row.
    - :class:`Terminal`: retrying cannot help (the spec is invalid). The host
      records a warning event and does not retry until the object changes.

    Any other exception escaping ``reconcile`` is a bug in the reconciler: it
    traps the component (the host logs the traceback and retries with
    backoff), as a panic does in Rust.

    A failure may carry the parent's ``status`` (a dict, or a dataclass
    written with camelCase keys): the host writes it (only when it differs,
    and sets ``observedGeneration`` unless it is there) before it records the
    event and backs off, so the parent says why while the host waits::

        raise Terminal(message, status={"conditions": [ready_false(message)]})
    """

    terminal: bool = False

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.message = str(message)
        self.status: dict | None = None
        if status is not None:
            value = to_json(status)
            if not isinstance(value, dict):
                raise TypeError(f"a failure's status must be a JSON object, not {value!r}")
            self.status = value

    def context(self, context: str) -> Failure:
        """The same kind of failure, its message prefixed with ``context: ``, with the same status."""
        return type(self)(f"{context}: {self.message}", self.status)

    def with_status(self, status: Any) -> Failure:
        """The same failure carrying ``status`` (see above)."""
        return type(self)(self.message, status)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.message == self.message  # type: ignore[attr-defined]
            and other.status == self.status  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self), self.message))

    def __repr__(self) -> str:
        if self.status is None:
            return f"{type(self).__name__}({self.message!r})"
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"


class Transient(Failure):
    """A failure the host retries with backoff."""


class Terminal(Failure):
    """A failure the host does not retry until the object changes."""

    terminal = True
