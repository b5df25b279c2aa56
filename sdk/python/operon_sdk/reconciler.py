"""The :class:`Reconciler` base class."""

from __future__ import annotations

import typing
from typing import Any, Generic, TypeVar

from .context import Context
from .failure import Failure, Terminal
from .manifest import Manifest
from .outcome import Outcome
from .request import Request

T = TypeVar("T")


class Reconciler(Generic[T]):
    """A reconciler: the kind it reconciles and how.

    Subclass it, parameterised by the parent's type (a dataclass, or ``dict``),
    and name the class in ``pyproject.toml`` (``[tool.operon] reconciler =
    "module:Class"``); ``operon build`` makes it the component's exports.

    The host may give every call a fresh instance and calls ``reconcile`` any
    number of times for the same object (reconciliation is level-based): keep
    no state between calls, derive the answer from the request alone.

    Admission is optional: define ``validate(review, ctx) -> list[str]``
    (warnings; raise :class:`~operon_sdk.Denied` to refuse) and/or
    ``mutate(review, ctx) -> dict | None`` (the whole object as it should be
    stored, or None to leave it), and set ``world =
    "reconciler-with-admission"`` in ``operon.toml``. A reconciler without
    them builds the plain ``reconciler`` world.

    Conversion is optional too: define ``convert(objects, desired_api_version)
    -> list[dict]`` (each object, as a dict, converted to
    ``desired_api_version``, in order; raise
    :class:`~operon_sdk.ConversionError` to refuse the request) and set
    ``world = "reconciler-with-conversion"`` (or
    ``"reconciler-with-admission-and-conversion"``).

    Attributes:
        object_type: what the parent is read as. Defaults to the type
            argument (``class Greeter(Reconciler[Greeting])`` reads a
            ``Greeting``); ``dict`` when there is none. A parent that does not
            fit is a terminal failure naming the object and the field
            (``WebApp shop/web is invalid: missing field `image```), raised
            before ``reconcile`` runs, also while finalizing: keep the type as
            lenient as the CRD's schema. :meth:`invalid` may give that
            failure a status.
    """

    object_type: Any = None

    def manifest(self) -> Manifest:
        """Describe the reconciler. Must be pure and cheap: the host calls it when
        it loads (and smoke-tests) the module."""
        raise NotImplementedError(f"{type(self).__name__} must define manifest()")

    def reconcile(self, request: Request[T], ctx: Context) -> Outcome:
        """Compute the desired state of one parent.

        Raises:
            Transient: to be retried with backoff.
            Terminal: to wait until the object changes.
        """
        raise NotImplementedError(f"{type(self).__name__} must define reconcile()")

    def invalid(self, request: Request[dict], failure: Terminal) -> Failure:
        """The failure to answer when the parent does not fit ``object_type``
        (``failure``, raised before ``reconcile`` runs). The default answers it
        as it is; override it to carry a status (``failure.with_status(...)``),
        e.g. a ``Ready`` condition saying why. ``request`` has the parent as a
        dict."""
        return failure

    @classmethod
    def parent_type(cls) -> Any:
        """The type the parent is read as (see ``object_type``)."""
        if cls.object_type is not None:
            return cls.object_type
        for klass in cls.__mro__:
            for base in getattr(klass, "__orig_bases__", ()):
                if typing.get_origin(base) is Reconciler:
                    (arg,) = typing.get_args(base)
                    return None if isinstance(arg, TypeVar) else arg
        return None

    @classmethod
    def has_admission(cls) -> bool:
        """Whether the class defines ``validate`` or ``mutate``."""
        return callable(getattr(cls, "validate", None)) or callable(getattr(cls, "mutate", None))

    @classmethod
    def has_conversion(cls) -> bool:
        """Whether the class defines ``convert``."""
        return callable(getattr(cls, "convert", None))

