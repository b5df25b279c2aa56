"""The one code path from a WIT record to a WIT record, shared by the component
adapter and native callers (tests).

The component's exports call these functions with the WIT imports as the
:class:`~operon_sdk.context.Host`; :mod:`operon_sdk.testing` calls them with a
:class:`~operon_sdk.testing.FakeCluster`. Anything that passes natively
through them runs the same in the component.
"""

from __future__ import annotations

import json
from typing import Any

from .admission import RawReview
from .context import Context, Host
from .conversion import ConversionError
from .egress import HttpError
from .failure import Failure, Terminal, Transient
from .manifest import Manifest
from .outcome import Outcome, RawOutcome
from .reconciler import Reconciler
from .request import RawRequest, Request


def manifest(reconciler: Reconciler[Any]) -> Manifest:
    """The ``manifest`` export."""
    result = reconciler.manifest()
    if not isinstance(result, Manifest):
        raise TypeError(f"{type(reconciler).__name__}.manifest() must return a Manifest, not {result!r}")
    return result


def reconcile(reconciler: Reconciler[Any], host: Host, raw: RawRequest) -> RawOutcome:
    """The ``reconcile`` export: parse the parent as the reconciler's type, call
    ``reconcile`` with a :class:`Context` over ``host``, serialize the outcome.

    The outcome's ``needs_finalizer``, when the reconciler did not say, is
    whether the manifest names a finalizer, except while finalizing (false):
    so code written before contract 0.2 keeps its finalizer on every parent.

    Raises:
        Transient, Terminal: the reconciler's failure; terminal also when the
            parent does not fit its type (through ``reconciler.invalid``) or
            the outcome cannot be serialized; transient when an
            :class:`~operon_sdk.HttpError` escapes ``reconcile``.
    """
    try:
        request = Request.from_raw(raw, type(reconciler).parent_type())
    except Terminal as failure:
        try:
            untyped = Request.from_raw(raw, dict)
        except Terminal:
            raise failure from None  # not even a JSON object: nothing to describe
        answer = reconciler.invalid(untyped, failure)
        if not isinstance(answer, Failure):
            raise TypeError(f"{type(reconciler).__name__}.invalid() must return a Failure, not {answer!r}") from None
        raise answer from None
    try:
        outcome = reconciler.reconcile(request, Context(host))
    except HttpError as error:
        raise Transient(f"{error.call}: {error}" if error.call else str(error)) from None
    if not isinstance(outcome, Outcome):
        raise Terminal(f"{type(reconciler).__name__}.reconcile() must return an Outcome, not {type(outcome).__name__}")
    out = outcome.to_raw()
    if out.needs_finalizer is None:
        out.needs_finalizer = manifest(reconciler).finalizer is not None and not request.finalizing
    return out


def convert(reconciler: Reconciler[Any], objects: list[str], desired_api_version: str) -> list[str]:
    """The ``convert`` export: every object converted, as JSON text.

    Raises:
        ConversionError: the reconciler refused, or answered another number
            of objects (the host would refuse that answer anyway).
        TypeError: ``convert`` did not return a list of dicts (a bug: the
            component traps).
    """
    method = getattr(reconciler, "convert", None)
    if method is None:
        raise ConversionError(f"{type(reconciler).__name__} does not convert (it defines no convert method)")
    try:
        parsed = [json.loads(o) for o in objects]
    except ValueError as error:
        raise ConversionError(f"an object is not JSON: {error}") from None
    converted = method(parsed, desired_api_version)
    if not isinstance(converted, list) or not all(isinstance(o, dict) for o in converted):
        raise TypeError(f"{type(reconciler).__name__}.convert() must return a list of dicts, not {converted!r}")
    if len(converted) != len(objects):
        raise ConversionError(f"convert answered {len(converted)} objects for {len(objects)}")
    return [json.dumps(o, separators=(",", ":"), ensure_ascii=False) for o in converted]


def validate(reconciler: Reconciler[Any], host: Host, raw: RawReview) -> list[str]:
    """The ``validate`` export: the warnings, or :class:`~operon_sdk.Denied`.
    A reconciler without ``validate`` allows everything."""
    method = getattr(reconciler, "validate", None)
    if method is None:
        return []
    warnings = method(raw.parse(), Context(host, calls=False))
    return [str(w) for w in (warnings or [])]


def mutate(reconciler: Reconciler[Any], host: Host, raw: RawReview) -> str | None:
    """The ``mutate`` export: the whole object as JSON text, None to leave it, or
    :class:`~operon_sdk.Denied`. A reconciler without ``mutate`` changes nothing."""
    method = getattr(reconciler, "mutate", None)
    if method is None:
        return None
    result = method(raw.parse(), Context(host, calls=False))
    if result is None:
        return None
    if not isinstance(result, dict):
        raise TypeError(f"{type(reconciler).__name__}.mutate() must return a dict or None, not {result!r}")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)
