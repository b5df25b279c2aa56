//! A wasm32-wasip2 guest using Rust std, so its component imports WASI. It
//! writes one line to stdout and one to stderr, then probes the sandbox and
//! reports what it saw in the status:
//!
//! `{"envCount":0,"fsError":"...","netError":"..."}`
//!
//! `fsError` / `netError` are null when the operation succeeded (then
//! `fsEntries` counts the entries of `/`, and `netConnected` is true). A host
//! that grants nothing should yield envCount 0 and both errors set. Otherwise
//! a well-behaved reconcile: no children, finalizes when asked.
//!
//! With `spec.panic: MESSAGE` it panics with that message (Rust std writes
//! it to stderr) and so traps.
//!
//! With `spec.flood: N` it first writes N bytes of 100-byte lines to stdout,
//! a 10 KB line without a newline to stderr, then one last line; a failing
//! write panics (as `println!` does), so the call traps if the host ever
//! refuses or closes its output. The status then says `"flooded": N`.

wit_bindgen::generate!({ path: "../../../../wit/0.1", world: "reconciler" });

use exports::operon::reconciler::guest::Guest;
use operon::reconciler::types::{Failure, Gvk, Outcome, ReconcilerManifest, Request};

struct Component;
export!(Component);

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk { group: group.into(), version: version.into(), kind: kind.into() }
}

impl Guest for Component {
    fn manifest() -> ReconcilerManifest {
        ReconcilerManifest {
            name: "wasi-stdio".into(),
            for_: gvk("example.operon.dev", "v1alpha1", "Thing"),
            owns: vec![gvk("apps", "v1", "Deployment")],
            watches: vec![],
            reads: vec![],
            finalizer: None,
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let object: serde_json::Value = serde_json::from_str(&request.object).unwrap_or_default();
        if let Some(message) = object.pointer("/spec/panic").and_then(serde_json::Value::as_str) {
            // Rust std writes the panic to stderr, then the guest traps.
            panic!("{message}");
        }
        let flood = object.pointer("/spec/flood").and_then(serde_json::Value::as_u64).unwrap_or(0);
        if flood > 0 {
            use std::io::Write;
            let line = format!("{}\n", "x".repeat(99));
            let mut stdout = std::io::stdout().lock();
            for _ in 0..flood / 100 {
                stdout.write_all(line.as_bytes()).expect("stdout refused a write");
            }
            stdout.flush().expect("stdout refused a flush");
            eprint!("{}", "y".repeat(10_000));
            println!("wasi-stdio: still writing after {flood} bytes");
        }
        println!("wasi-stdio: hello on stdout");
        eprintln!("wasi-stdio: hello on stderr");

        let mut status = serde_json::Map::new();
        if flood > 0 {
            status.insert("flooded".into(), flood.into());
        }
        status.insert("envCount".into(), std::env::vars_os().count().into());
        match std::fs::read_dir("/") {
            Ok(entries) => {
                status.insert("fsError".into(), serde_json::Value::Null);
                status.insert("fsEntries".into(), entries.count().into());
            }
            Err(e) => {
                status.insert("fsError".into(), e.to_string().into());
            }
        }
        match std::net::TcpStream::connect("127.0.0.1:1") {
            Ok(_) => {
                status.insert("netError".into(), serde_json::Value::Null);
                status.insert("netConnected".into(), true.into());
            }
            Err(e) => {
                status.insert("netError".into(), e.to_string().into());
            }
        }

        Ok(Outcome {
            desired: vec![],
            status: Some(serde_json::Value::Object(status).to_string()),
            events: vec![],
            requeue_after_ms: None,
            finalized: request.finalizing,
        })
    }
}
