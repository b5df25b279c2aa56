//! Exports `operon:reconciler/guest@0.1.0` with the right names but a
//! `reconcile` of the wrong type: `func(request: string) -> result<string,
//! string>` (see `wit/reconciler.wit` here). `manifest` is correct, so the
//! host's type check must name `reconcile` as the mismatch.

wit_bindgen::generate!({ path: "wit", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Gvk, ReconcilerManifest};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "misbehave-wrong-signature".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: String) -> Result<String, String> {
        Ok(format!("{{\"echo\":{}}}", request.len()))
    }
}
