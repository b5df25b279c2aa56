//! Arbitrary bytes as a module: `Runtime::load` must refuse what is not a
//! valid reconciler component with a `LoadError`, never panic or crash, and
//! whatever it does load must answer a reconcile within its limits (a trap
//! or timeout is an answer). Seeded with the built guests
//! (`target/guests/*.wasm`), so mutations explore real components.

#![no_main]

use libfuzzer_sys::fuzz_target;
use operon::runtime::{self, Limits, NoObjects, Request, Runtime};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(runtime::Config { artifact_dir: None, instance_slots: 16, max_memory: 16 << 20, ..Default::default() })
            .expect("engine")
    })
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits { timeout: Duration::from_millis(50), memory: 16 << 20, ..Limits::default() };
    let Ok(module) = runtime().load(data, limits) else { return };
    let request = Request {
        object: r#"{"apiVersion":"example.operon.dev/v1alpha1","kind":"Thing","metadata":{"name":"t","namespace":"default","uid":"u"}}"#.into(),
        ..Request::default()
    };
    let _ = module.reconcile(&request, Arc::new(NoObjects));
});
