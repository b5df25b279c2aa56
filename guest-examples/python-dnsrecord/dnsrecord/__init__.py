"""Example Operon reconciler in Python with outbound HTTP (contract 0.2's
``egress``): a ``DnsRecord`` (``dns.example.operon.dev/v1alpha1``, see
``../dnsrecord/crd.yaml``) keeps one rrset of a PowerDNS zone, through the
PowerDNS HTTP API. The host makes every call: only to what the Reconciler's
``spec.grants.egress`` allows, with the API key of its credential ``pdns``
(the guest never sees it).

.. code-block:: yaml

    spec:
      server: http://127.0.0.1:8081   # the PowerDNS API
      zone: example.org.
      name: www                       # in the zone; or www.example.org., or @ for the zone itself
      type: A                         # A, AAAA, CNAME or TXT
      ttl: 300                        # the default
      records: [192.0.2.1, 192.0.2.2]

The same reconciler as ``guest-examples/rust-dnsrecord`` (whose
``src/lib.rs`` documents the rules); ``guest-examples/dnsrecord/fixtures``,
with every PowerDNS call recorded, pins both.

- **Look, then write**: read the rrset, replace it (``PATCH``, ``changetype:
  REPLACE``) only when it differs from the spec (records compared by value,
  and the TTL).
- **Drift**: requeue after five minutes, so a record changed behind the
  DnsRecord's back is put back.
- **Status**: ``observedGeneration``, where the rrset is published
  (``server``, ``zone``, ``fqdn``, ``type``) and a ``Ready`` condition.
- **Moves**: an rrset published under another name, type, zone or server is
  deleted first (event ``Removed``).
- **Events**: ``Created``, ``Updated``, ``Removed``; ``Deleted`` on deletion.
- **Deletion**: the finalizer ``dns.example.operon.dev/record``; a
  finalizing call deletes the rrset, then answers ``finalized``.
- **Failures**, each with a status whose ``Ready`` condition is ``False``:
  ``InvalidSpec``, ``ZoneNotFound``, ``EgressDenied`` and
  ``RecordRejected`` are terminal; ``ServerUnavailable``, ``Unauthorized``,
  ``ServerError`` and ``EgressFailed`` are transient.
"""

from __future__ import annotations

from typing import Any

from operon_sdk import Context, Gvk, Manifest, Outcome, Reconciler, Request, Terminal, Transient
from operon_sdk.failure import Failure

from . import pdns, spec, status
from .pdns import CREDENTIAL, Problem, Target
from .spec import InvalidSpec, Record
from .status import Previous

__all__ = [
    "CREDENTIAL",
    "DNS_RECORD",
    "FINALIZER",
    "RESYNC_SECONDS",
    "DnsRecordReconciler",
    "InvalidSpec",
    "Previous",
    "Problem",
    "Record",
    "Target",
]

DNS_RECORD = Gvk("dns.example.operon.dev", "v1alpha1", "DnsRecord")

FINALIZER = "dns.example.operon.dev/record"
"""The finalizer the host keeps on every DnsRecord while its rrset may exist."""

RESYNC_SECONDS = 300
"""How often a DnsRecord is looked at again for drift."""


class DnsRecordReconciler(Reconciler[dict]):
    """The DnsRecord reconciler. The parent is read as a dict: the spec is
    checked by :func:`dnsrecord.spec.parse`, so that an invalid one fails
    *with* a status saying why."""

    def manifest(self) -> Manifest:
        return Manifest("dnsrecord", DNS_RECORD, finalizer=FINALIZER)

    def reconcile(self, request: Request[dict], ctx: Context) -> Outcome:
        parent = request.raw
        previous = Previous.read(parent.get("status"))
        try:
            record: Record | None = spec.parse(parent.get("spec"))
            invalid = None
        except InvalidSpec as error:
            record, invalid = None, str(error)
        if request.finalizing:
            return _finalize(request, ctx, record, previous)
        if record is None:
            raise _failure(request, previous, previous.published, pdns.terminal("InvalidSpec", str(invalid)))
        target = Target.of(record)
        outcome = Outcome()

        published = previous.published
        try:
            old = previous.published
            if old is not None and old != target:
                if pdns.delete(ctx, old):
                    outcome.event(
                        "Removed",
                        f"removed {old.fqdn} {old.rtype} from zone {old.zone}: "
                        f"the record is now {target.fqdn} {target.rtype}",
                    )
                published = None

            current = pdns.read(ctx, target)
            if current is None or not current.matches(record):
                pdns.replace(ctx, record)
                if current is None:
                    outcome.event("Created", f"created {record.describe()} in zone {record.zone}")
                else:
                    outcome.event("Updated", f"updated {record.describe()}; it was {current.describe()}")
        except Problem as problem:
            raise _failure(request, previous, published, problem) from None

        ready = status.status(request, previous, target, True, "Synced", record.describe())
        return outcome.set_status(ready).needs_finalizer(True).requeue_after(RESYNC_SECONDS)


def _finalize(request: Request[Any], ctx: Context, record: Record | None, previous: Previous) -> Outcome:
    """The DnsRecord is being deleted: delete its rrset — the one the spec
    names, and the one the status says is published if that is another —
    then let it go."""
    targets = [Target.of(record)] if record is not None else []
    if previous.published is not None and previous.published not in targets:
        targets.append(previous.published)
    outcome = Outcome()
    for target in targets:
        try:
            deleted = pdns.delete(ctx, target)
        except Problem as problem:
            raise _failure(request, previous, previous.published, problem) from None
        if deleted:
            outcome.event("Deleted", f"deleted {target.fqdn} {target.rtype} from zone {target.zone}")
    return outcome.finish()


def _failure(request: Request[Any], previous: Previous, published: Target | None, problem: Problem) -> Failure:
    """The failure of ``problem``, carrying a status whose ``Ready`` condition says it."""
    carried = status.status(request, previous, published, False, problem.reason, problem.message)
    kind = Terminal if problem.terminal else Transient
    return kind(problem.message, status=carried)
