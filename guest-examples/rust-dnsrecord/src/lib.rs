//! Example Operon reconciler with outbound HTTP (contract 0.2's `egress`): a
//! `DnsRecord` (`dns.example.operon.dev/v1alpha1`, see
//! `../dnsrecord/crd.yaml`) keeps one rrset of a PowerDNS zone, through the
//! PowerDNS HTTP API. The host makes every call: only to what the
//! Reconciler's `spec.grants.egress` allows, with the API key of its
//! credential `pdns` (the guest never sees it).
//!
//! ```yaml
//! spec:
//!   server: http://127.0.0.1:8081   # the PowerDNS API
//!   zone: example.org.
//!   name: www                       # in the zone; or www.example.org., or @ for the zone itself
//!   type: A                         # A, AAAA, CNAME or TXT
//!   ttl: 300                        # the default
//!   records: [192.0.2.1, 192.0.2.2]
//! ```
//!
//! # Behaviour
//!
//! - **Look, then write**: each reconcile reads the rrset
//!   (`GET {server}/api/v1/servers/localhost/zones/{zone}?rrset_name=..&rrset_type=..`)
//!   and, only when it differs from the spec (records compared by value —
//!   `2001:db8::1` is `2001:DB8:0::1` — and the TTL), replaces it with a
//!   `PATCH` of the zone (`changetype: REPLACE`). A CNAME's target is made
//!   absolute and a TXT's text quoted, as PowerDNS wants them.
//! - **Drift**: `requeue_after` five minutes, so a record changed behind
//!   the DnsRecord's back is put back.
//! - **Status**: `observedGeneration`, where the rrset is published
//!   (`server`, `zone`, `fqdn`, `type`) and a `Ready` condition: `True`/
//!   `Synced` with the record, or `False` with why ([`pdns::Problem`]).
//!   Its `lastTransitionTime` is kept while it holds, else the request's
//!   `now`.
//! - **Moves**: when the spec names another rrset than the status says is
//!   published (a new name, type, zone or server), the old one is deleted
//!   first (event `Removed`).
//! - **Events**: `Created` and `Updated` (with what was there), only when
//!   something is written, so a steady state records none; `Deleted` on
//!   deletion.
//! - **Deletion**: the finalizer `dns.example.operon.dev/record` (every
//!   outcome needs it); a finalizing call deletes the rrset (`changetype:
//!   DELETE`; a zone that is gone has nothing to delete), then answers
//!   `finalized`.
//! - **Failures**, each with a status whose `Ready` condition is `False`:
//!   an invalid spec (`InvalidSpec`), a zone that does not exist
//!   (`ZoneNotFound`), a call the host denies (`EgressDenied`, naming the
//!   grant to add) and a record PowerDNS refuses (422, `RecordRejected`)
//!   are terminal; PowerDNS unreachable or too slow (`ServerUnavailable`),
//!   refusing the API key (`Unauthorized`) or answering an error
//!   (`ServerError`) are transient, retried with backoff.

pub mod pdns;
pub mod spec;
pub mod status;

use std::time::Duration;

use operon_sdk::{Context, Failure, Manifest, ObjectKind, Outcome, Reconciler, Request};
use serde::Deserialize;
use serde_json::Value;

pub use pdns::{CREDENTIAL, Problem, Target};
pub use spec::Record;
pub use status::{DnsRecordStatus, Previous};

/// The finalizer the host keeps on every DnsRecord while its rrset may exist.
pub const FINALIZER: &str = "dns.example.operon.dev/record";

/// How often a DnsRecord is looked at again for drift.
pub const RESYNC: Duration = Duration::from_secs(300);

/// A DnsRecord as the SDK hands it in: `spec` and `status` as JSON, read by
/// [`Record::parse`] and [`Previous::read`] (so that an invalid spec fails
/// *with* a status saying why, in this example's words).
#[derive(Debug, Clone, Deserialize)]
pub struct DnsRecord {
    /// `spec`, as sent.
    #[serde(default)]
    pub spec: Value,
    /// `status`, as sent.
    #[serde(default)]
    pub status: Value,
}

impl ObjectKind for DnsRecord {
    const API_VERSION: &'static str = "dns.example.operon.dev/v1alpha1";
    const KIND: &'static str = "DnsRecord";
}

/// The DnsRecord reconciler.
#[derive(Debug)]
pub struct DnsRecordReconciler;

impl Reconciler for DnsRecordReconciler {
    type Object = DnsRecord;

    fn manifest() -> Manifest {
        Manifest::new("dnsrecord", DnsRecord::gvk()).finalizer(FINALIZER)
    }

    fn reconcile(req: Request<DnsRecord>, ctx: &Context) -> Result<Outcome, Failure> {
        let previous = Previous::read(&req.object.status);
        let record = Record::parse(&req.object.spec);
        if req.finalizing {
            return finalize(&req, ctx, record.ok().as_ref(), &previous);
        }
        let fail = |problem: Problem, published: Option<&Target>| failure(&req, &previous, published, problem);
        let record =
            record.map_err(|message| fail(Problem::terminal("InvalidSpec", message), previous.published.as_ref()))?;
        let target = Target::of(&record);
        let mut outcome = Outcome::new();

        let mut published = previous.published.clone();
        if let Some(old) = previous.published.as_ref().filter(|old| **old != target) {
            let deleted = pdns::delete(ctx, old).map_err(|problem| fail(problem, Some(old)))?;
            if deleted {
                outcome = outcome.event(
                    "Removed",
                    format!(
                        "removed {} {} from zone {}: the record is now {} {}",
                        old.fqdn, old.rtype, old.zone, target.fqdn, target.rtype
                    ),
                );
            }
            published = None;
        }

        let current = pdns::read(ctx, &target).map_err(|problem| fail(problem, published.as_ref()))?;
        match current {
            Some(rrset) if rrset.matches(&record) => {}
            current => {
                pdns::replace(ctx, &record).map_err(|problem| fail(problem, published.as_ref()))?;
                outcome = match current {
                    None => outcome.event("Created", format!("created {} in zone {}", record.describe(), record.zone)),
                    Some(rrset) => {
                        outcome.event("Updated", format!("updated {}; it was {}", record.describe(), rrset.describe()))
                    }
                };
            }
        }
        let status = status::status(&req, &previous, Some(&target), true, "Synced", &record.describe());
        Ok(outcome.status(status).needs_finalizer(true).requeue_after(RESYNC))
    }
}

/// The DnsRecord is being deleted: delete its rrset — the one the spec
/// names, and the one the status says is published if that is another —
/// then let it go.
fn finalize(
    req: &Request<DnsRecord>,
    ctx: &Context,
    record: Option<&Record>,
    previous: &Previous,
) -> Result<Outcome, Failure> {
    let mut targets: Vec<Target> = record.map(Target::of).into_iter().collect();
    if let Some(published) = &previous.published
        && !targets.contains(published)
    {
        targets.push(published.clone());
    }
    let mut outcome = Outcome::new();
    for target in &targets {
        let deleted = pdns::delete(ctx, target)
            .map_err(|problem| failure(req, previous, previous.published.as_ref(), problem))?;
        if deleted {
            outcome =
                outcome.event("Deleted", format!("deleted {} {} from zone {}", target.fqdn, target.rtype, target.zone));
        }
    }
    Ok(outcome.finalized())
}

/// The failure of `problem`, carrying a status whose `Ready` condition says it.
fn failure(req: &Request<DnsRecord>, previous: &Previous, published: Option<&Target>, problem: Problem) -> Failure {
    let status = status::status(req, previous, published, false, problem.reason, &problem.message);
    let failure =
        if problem.terminal { Failure::terminal(problem.message) } else { Failure::transient(problem.message) };
    failure.with_status(status)
}

operon_sdk::export!(DnsRecordReconciler);

#[cfg(test)]
mod tests;
