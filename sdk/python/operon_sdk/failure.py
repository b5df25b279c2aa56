"""Why a reconcile produced no outcome: raise :class:`Transient` or :class:`Terminal`."""

from __future__ import annotations


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
    """

    terminal: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = str(message)

    def context(self, context: str) -> Failure:
        """The same kind of failure, its message prefixed with ``context: ``."""
        return type(self)(f"{context}: {self.message}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.message == self.message  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class Transient(Failure):
    """A failure the host retries with backoff."""


class Terminal(Failure):
    """A failure the host does not retry until the object changes."""

    terminal = True
