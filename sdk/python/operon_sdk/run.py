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
from .failure import Terminal
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

    Raises:
        Transient, Terminal: the reconciler's failure; terminal also when the
            parent does not fit its type or the outcome cannot be serialized.
    """
    request = Request.from_raw(raw, type(reconciler).parent_type())
    outcome = reconciler.reconcile(request, Context(host))
    if not isinstance(outcome, Outcome):
        raise Terminal(f"{type(reconciler).__name__}.reconcile() must return an Outcome, not {type(outcome).__name__}")
    return outcome.to_raw()


def validate(reconciler: Reconciler[Any], host: Host, raw: RawReview) -> list[str]:
    """The ``validate`` export: the warnings, or :class:`~operon_sdk.Denied`.
    A reconciler without ``validate`` allows everything."""
    method = getattr(reconciler, "validate", None)
    if method is None:
        return []
    warnings = method(raw.parse(), Context(host))
    return [str(w) for w in (warnings or [])]


def mutate(reconciler: Reconciler[Any], host: Host, raw: RawReview) -> str | None:
    """The ``mutate`` export: the whole object as JSON text, None to leave it, or
    :class:`~operon_sdk.Denied`. A reconciler without ``mutate`` changes nothing."""
    method = getattr(reconciler, "mutate", None)
    if method is None:
        return None
    result = method(raw.parse(), Context(host))
    if result is None:
        return None
    if not isinstance(result, dict):
        raise TypeError(f"{type(reconciler).__name__}.mutate() must return a dict or None, not {result!r}")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)
