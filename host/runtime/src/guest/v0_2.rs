//! Contract 0.2 (`wit/reconciler.wit`): the time as an input, watches
//! by reference and by selector, each child's readiness, failures that
//! carry a status. Runs beside 0.1 in the same host.

use super::{Contract, RawFailure, RawOutcome, State, host_import};
use crate::contract::readiness::{Readiness, ReadinessStatus};
use crate::contract::{
    Denial, Failure, Gvk, Manifest, Mapping, ParentMetadata, Request, Review, UpdateStrategy, Watch,
};
use wasmtime::Store;
use wasmtime::component::InstancePre;

// Exports are called async (the guest yields at epoch ticks); of the
// imports only `egress.fetch` awaits (reads answer from memory).
wasmtime::component::bindgen!({
    path: "../../wit/reconciler.wit",
    world: "reconciler",
    imports: { "operon:reconciler/egress.fetch": async },
    exports: { default: async },
});

/// The world with `validate` and `mutate` beside `reconcile`.
pub(crate) mod admission_world {
    wasmtime::component::bindgen!({
        path: "../../wit/reconciler.wit",
        world: "reconciler-with-admission",
        exports: { default: async },
        with: {
            "operon:reconciler/types": super::operon::reconciler::types,
            "operon:reconciler/host": super::operon::reconciler::host,
            "operon:reconciler/egress": super::operon::reconciler::egress,
        },
    });
}

/// The world with `convert` beside `reconcile`.
pub(crate) mod conversion_world {
    wasmtime::component::bindgen!({
        path: "../../wit/reconciler.wit",
        world: "reconciler-with-conversion",
        exports: { default: async },
        with: {
            "operon:reconciler/types": super::operon::reconciler::types,
            "operon:reconciler/host": super::operon::reconciler::host,
            "operon:reconciler/egress": super::operon::reconciler::egress,
        },
    });
}

impl super::super::call::World for conversion_world::ReconcilerWithConversion {
    type Pre = conversion_world::ReconcilerWithConversionPre<State>;
    async fn instantiate(pre: &Self::Pre, store: &mut Store<State>) -> wasmtime::Result<Self> {
        pre.instantiate_async(store).await
    }
}

/// Call `convert`.
pub(crate) async fn convert(
    b: &conversion_world::ReconcilerWithConversion,
    store: &mut Store<State>,
    objects: &[String],
    desired_api_version: &str,
) -> wasmtime::Result<Result<Vec<String>, String>> {
    b.operon_reconciler_conversion().call_convert(store, objects, desired_api_version).await
}

use admission_world::exports::operon::reconciler::admission;

host_import!();

use self::operon::reconciler::egress as wit_egress;
use crate::contract::egress::{HttpError, HttpRequest, HttpResponse};

impl wit_egress::Host for State {
    async fn fetch(&mut self, r: wit_egress::HttpRequest) -> Result<wit_egress::HttpResponse, wit_egress::HttpError> {
        let request = HttpRequest {
            method: r.method,
            url: r.url,
            headers: r.headers,
            body: r.body,
            credential: r.credential,
            timeout_ms: r.timeout_ms,
        };
        match self.guest_fetch(request).await {
            Ok(HttpResponse { status, headers, body }) => Ok(wit_egress::HttpResponse { status, headers, body }),
            Err(e) => Err(match e {
                HttpError::Denied(m) => wit_egress::HttpError::Denied(m),
                HttpError::Invalid(m) => wit_egress::HttpError::Invalid(m),
                HttpError::Timeout(m) => wit_egress::HttpError::Timeout(m),
                HttpError::Unreachable(m) => wit_egress::HttpError::Unreachable(m),
                HttpError::TooLarge(m) => wit_egress::HttpError::TooLarge(m),
                HttpError::Budget(m) => wit_egress::HttpError::Budget(m),
                HttpError::NotRecorded(m) => wit_egress::HttpError::NotRecorded(m),
            }),
        }
    }
}

/// Contract 0.2.
pub(crate) struct V0_2;

impl Contract for V0_2 {
    type Reconciler = Reconciler;
    type Admission = admission_world::ReconcilerWithAdmission;
    /// The request, and the parent's generation for `observedGeneration`.
    type Request = (wit::Request, Option<i64>);
    const VERSION: &'static str = crate::contract::WIT_VERSIONS_RUN[1];
    const CLOCK: bool = true;

    fn reconciler_pre(pre: InstancePre<State>) -> wasmtime::Result<ReconcilerPre<State>> {
        ReconcilerPre::new(pre)
    }

    fn admission_pre(pre: InstancePre<State>) -> wasmtime::Result<admission_world::ReconcilerWithAdmissionPre<State>> {
        admission_world::ReconcilerWithAdmissionPre::new(pre)
    }

    async fn manifest(b: &Reconciler, store: &mut Store<State>) -> wasmtime::Result<Manifest> {
        Ok(manifest(b.operon_reconciler_guest().call_manifest(store).await?))
    }

    fn request(r: &Request) -> (wit::Request, Option<i64>) {
        // Rated by the host's cache once per object version; otherwise here.
        let rated_all = r.readiness.len() == r.children.len()
            && r.readiness.iter().zip(&r.children).all(|(rated, (_, objects))| rated.len() == objects.len());
        let child = |group: usize, i: usize, text: &String| wit::Child {
            object: text.clone(),
            readiness: readiness(match r.readiness.get(group).and_then(|g| g.get(i)).filter(|_| rated_all) {
                Some(known) => known.clone(),
                None => Readiness::of_json(text),
            }),
        };
        let request = wit::Request {
            object: r.object.clone(),
            children: r
                .children
                .iter()
                .enumerate()
                .map(|(g, (kind, objects))| wit::Children {
                    kind: kind.into(),
                    objects: objects.iter().enumerate().map(|(i, text)| child(g, i, text)).collect(),
                })
                .collect(),
            related: r.related.clone(),
            finalizing: r.finalizing,
            attempt: r.attempt,
            now: r.now_text(),
        };
        (request, r.generation)
    }

    async fn reconcile(
        b: &Reconciler,
        store: &mut Store<State>,
        (r, generation): &(wit::Request, Option<i64>),
    ) -> wasmtime::Result<Result<RawOutcome, RawFailure>> {
        Ok(match b.operon_reconciler_guest().call_reconcile(store, r).await? {
            Ok(o) => Ok(RawOutcome {
                desired: o.desired,
                status: o.status,
                events: events(o.events),
                requeue_after_ms: o.requeue_after_ms,
                requeue_at: o.requeue_at,
                finalized: o.finalized,
                observed_generation: *generation,
                needs_finalizer: Some(o.needs_finalizer),
                parent_metadata: o.parent_metadata.map(|m| ParentMetadata {
                    labels: m.labels.into_iter().collect(),
                    annotations: m.annotations.into_iter().collect(),
                }),
            }),
            Err(wit::Failure::Transient(d)) => Err(RawFailure {
                failure: Failure::Transient(d.message),
                status: d.status,
                observed_generation: *generation,
            }),
            Err(wit::Failure::Terminal(d)) => Err(RawFailure {
                failure: Failure::Terminal(d.message),
                status: d.status,
                observed_generation: *generation,
            }),
        })
    }

    async fn validate(
        b: &admission_world::ReconcilerWithAdmission,
        store: &mut Store<State>,
        r: &Review,
    ) -> wasmtime::Result<Result<Vec<String>, Denial>> {
        validate(b, store, r).await
    }

    async fn mutate(
        b: &admission_world::ReconcilerWithAdmission,
        store: &mut Store<State>,
        r: &Review,
    ) -> wasmtime::Result<Result<Option<String>, Denial>> {
        mutate(b, store, r).await
    }
}

fn readiness(r: Readiness) -> wit::Readiness {
    wit::Readiness {
        status: match r.status {
            ReadinessStatus::Current => wit::ReadinessStatus::Current,
            ReadinessStatus::InProgress => wit::ReadinessStatus::InProgress,
            ReadinessStatus::Failed => wit::ReadinessStatus::Failed,
            ReadinessStatus::Terminating => wit::ReadinessStatus::Terminating,
            ReadinessStatus::Unknown => wit::ReadinessStatus::Unknown,
        },
        message: r.message,
    }
}

fn manifest(m: wit::ReconcilerManifest) -> Manifest {
    Manifest {
        name: m.name,
        for_kind: m.for_.into(),
        owns: m.owns.into_iter().map(Gvk::from).collect(),
        watches: m
            .watches
            .into_iter()
            .map(|w| Watch {
                kind: w.kind.into(),
                mapping: match w.mapping {
                    wit::Mapping::Label(l) => Mapping::Label(l),
                    wit::Mapping::Annotation(a) => Mapping::Annotation(a),
                    wit::Mapping::AllInNamespace => Mapping::AllInNamespace,
                    wit::Mapping::Reference(p) => Mapping::Reference(p),
                    wit::Mapping::Selector(p) => Mapping::Selector(p),
                },
            })
            .collect(),
        reads: m.reads.into_iter().map(Gvk::from).collect(),
        finalizer: m.finalizer,
        updates: m
            .updates
            .into_iter()
            .map(|u| {
                let strategy = match u.strategy {
                    wit::UpdateStrategy::InPlace => UpdateStrategy::InPlace,
                    wit::UpdateStrategy::Recreate => UpdateStrategy::Recreate,
                    wit::UpdateStrategy::OnDelete => UpdateStrategy::OnDelete,
                };
                (Gvk::from(u.kind), strategy)
            })
            .collect(),
    }
}
