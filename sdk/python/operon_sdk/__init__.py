"""Write Operon reconcilers in Python.

A reconciler is a pure function, compiled to a WebAssembly component by
componentize-py: the host hands it one object (the *parent*) with its
children and related objects, and it answers with the children that should
exist, the parent's status, events and when to run again. The host does all
the I/O: it watches the cluster, applies the answer with server-side apply,
deletes children that are no longer wanted, writes the status and records
the events.

The contract:

- **Level-based.** The host may call ``reconcile`` any number of times for
  the same object. Derive the answer from the request alone; keep no state
  between calls (an instance may be fresh for every call).
- **Whole truth.** The :class:`Outcome` lists *every* child that should
  exist; existing children it leaves out are deleted.
- **Deterministic.** Same request, same outcome: the time is
  ``request.now`` (never the clock), no randomness, so an unchanged cluster
  causes no writes.
- **Readiness is handed in.** Each child comes with kstatus's verdict
  (``request.readiness(kind, name)``, ``request.all_children_current()``).
- **Failures.** Raise :class:`Transient` to be retried with backoff,
  :class:`Terminal` to wait until the object changes; either may carry the
  parent's status to write.
- **Calls out go through the host.** ``ctx.http(...)`` (contract 0.2's
  ``egress``) sends what the Reconciler's grants allow, with credentials the
  host adds; fixtures record the answers (``egress:``), so tests stay
  offline.

Example (the scaffold of ``operon new --lang python``)::

    from dataclasses import dataclass
    from operon_sdk import CONFIG_MAP, Gvk, Manifest, Outcome, Reconciler, Terminal, new_object

    @dataclass
    class GreetingSpec:
        message: str

    @dataclass
    class Greeting:
        spec: GreetingSpec

    class Greeter(Reconciler[Greeting]):
        def manifest(self):
            return Manifest("greeter", Gvk("demo.operon.dev", "v1alpha1", "Greeting"), owns=[CONFIG_MAP])

        def reconcile(self, request, ctx):
            if not request.object.spec.message:
                raise Terminal("spec.message must not be empty")
            name = f"{request.name}-greeting"
            return (Outcome()
                    .apply(new_object(CONFIG_MAP, name, data={"message": request.object.spec.message}))
                    .set_status({"observedGeneration": request.generation,
                                 "published": request.has_child(CONFIG_MAP, name)}))

Test it natively with :mod:`operon_sdk.testing` (the same code path the
component runs); build it with ``operon build``.
"""

# The SDK's version: the release it belongs to (every Operon SDK and the host
# share one version; `cargo xtask version` sets it). Its minor is that of the
# WIT contract it speaks, operon:reconciler@0.2.
__version__ = "0.2.0"

from .admission import Denied, Operation, Review, UserInfo
from .context import Context, HostError, Level
from .conversion import ConversionError
from .egress import HttpError, HttpRequest, HttpResponse
from .failure import Failure, Terminal, Transient
from .kinds import (
    CONFIG_MAP,
    CRON_JOB,
    DAEMON_SET,
    DEPLOYMENT,
    INGRESS,
    JOB,
    NETWORK_POLICY,
    PERSISTENT_VOLUME_CLAIM,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    Gvk,
)
from .manifest import AllInNamespace, Annotation, Label, Manifest, Mapping, Reference, Selector, UpdateStrategy, Watch
from .objects import Condition, find_condition, new_object, transition_time
from .outcome import Event, Outcome, ParentMetadata
from .readiness import Readiness, ReadinessStatus, format_time, parse_time
from .reconciler import Reconciler
from .request import Metadata, Request
from .typed import I32, I64, TypeMismatch, crd, from_json, openapi, to_json

__all__ = [
    "AllInNamespace",
    "Annotation",
    "CONFIG_MAP",
    "CRON_JOB",
    "Condition",
    "Context",
    "ConversionError",
    "DAEMON_SET",
    "DEPLOYMENT",
    "Denied",
    "Event",
    "Failure",
    "Gvk",
    "HostError",
    "HttpError",
    "HttpRequest",
    "HttpResponse",
    "I32",
    "I64",
    "INGRESS",
    "JOB",
    "Label",
    "Level",
    "Manifest",
    "Mapping",
    "Metadata",
    "NETWORK_POLICY",
    "Operation",
    "Outcome",
    "PERSISTENT_VOLUME_CLAIM",
    "ParentMetadata",
    "ROLE",
    "ROLE_BINDING",
    "Readiness",
    "ReadinessStatus",
    "Reconciler",
    "Reference",
    "Request",
    "Review",
    "SECRET",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "STATEFUL_SET",
    "Selector",
    "Terminal",
    "Transient",
    "TypeMismatch",
    "UpdateStrategy",
    "UserInfo",
    "Watch",
    "find_condition",
    "format_time",
    "crd",
    "from_json",
    "new_object",
    "openapi",
    "parse_time",
    "to_json",
    "transition_time",
]
