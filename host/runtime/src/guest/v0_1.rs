//! Contract 0.1 (`wit/0.1/reconciler.wit`): the bindings and conversions
//! of the first contract, which the host keeps running beside 0.2.

use super::{Contract, RawFailure, RawOutcome, State, host_import};
use crate::contract::{Denial, Failure, Gvk, Manifest, Mapping, Request, Review, Watch};
use wasmtime::Store;
use wasmtime::component::InstancePre;

wasmtime::component::bindgen!({
    path: "../../wit/0.1/reconciler.wit",
    world: "reconciler",
    exports: { default: async },
});

/// The world with `validate` and `mutate` beside `reconcile`: bindings of
/// its own, sharing the types and the host import with the base world's.
pub(crate) mod admission_world {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1/reconciler.wit",
        world: "reconciler-with-admission",
        exports: { default: async },
        with: {
            "operon:reconciler/types": super::operon::reconciler::types,
            "operon:reconciler/host": super::operon::reconciler::host,
        },
    });
}

use admission_world::exports::operon::reconciler::admission;

host_import!();

/// Contract 0.1.
pub(crate) struct V0_1;

impl Contract for V0_1 {
    type Reconciler = Reconciler;
    type Admission = admission_world::ReconcilerWithAdmission;
    type Request = wit::Request;
    const VERSION: &'static str = crate::contract::WIT_VERSIONS_RUN[0];
    const CLOCK: bool = false;

    fn reconciler_pre(pre: InstancePre<State>) -> wasmtime::Result<ReconcilerPre<State>> {
        ReconcilerPre::new(pre)
    }

    fn admission_pre(pre: InstancePre<State>) -> wasmtime::Result<admission_world::ReconcilerWithAdmissionPre<State>> {
        admission_world::ReconcilerWithAdmissionPre::new(pre)
    }

    async fn manifest(b: &Reconciler, store: &mut Store<State>) -> wasmtime::Result<Manifest> {
        Ok(manifest(b.operon_reconciler_guest().call_manifest(store).await?))
    }

    fn request(r: &Request) -> wit::Request {
        wit::Request {
            object: r.object.clone(),
            children: r
                .children
                .iter()
                .map(|(kind, objects)| wit::Children { kind: kind.into(), objects: objects.clone() })
                .collect(),
            related: r.related.clone(),
            finalizing: r.finalizing,
            attempt: r.attempt,
        }
    }

    async fn reconcile(
        b: &Reconciler,
        store: &mut Store<State>,
        r: &wit::Request,
    ) -> wasmtime::Result<Result<RawOutcome, RawFailure>> {
        Ok(match b.operon_reconciler_guest().call_reconcile(store, r).await? {
            Ok(o) => Ok(RawOutcome {
                desired: o.desired,
                status: o.status,
                events: events(o.events),
                requeue_after_ms: o.requeue_after_ms,
                requeue_at: None,
                finalized: o.finalized,
                observed_generation: None,
                needs_finalizer: None,
                parent_metadata: None,
            }),
            Err(wit::Failure::Transient(m)) => {
                Err(RawFailure { failure: Failure::Transient(m), status: None, observed_generation: None })
            }
            Err(wit::Failure::Terminal(m)) => {
                Err(RawFailure { failure: Failure::Terminal(m), status: None, observed_generation: None })
            }
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
                },
            })
            .collect(),
        reads: m.reads.into_iter().map(Gvk::from).collect(),
        finalizer: m.finalizer,
        updates: Vec::new(),
    }
}
