//! Guests written to misbehave: each must fail with its own clear error,
//! while a well-behaved module in the same process keeps working.

use crate::common;

use common::{guest, webapp};
use operon::runtime::{self, CallError, Failure, Limits, LoadError, Module, NoObjects, Request, Runtime};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn runtime() -> Runtime {
    Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).expect("engine")
}

fn limits() -> Limits {
    Limits { timeout: Duration::from_millis(300), memory: 32 << 20, ..Limits::default() }
}

fn load(rt: &Runtime, name: &str) -> Result<Module, LoadError> {
    rt.load(&guest(name), limits())
}

fn request(object: serde_json::Value) -> Request {
    Request { object: object.to_string(), ..Request::default() }
}

fn thing() -> Request {
    request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "uid": "u"}}))
}

fn call(module: &Module, req: &Request) -> Result<Result<runtime::Outcome, Failure>, CallError> {
    module.reconcile(req, Arc::new(NoObjects)).map(|answer| answer.map_err(|failed| failed.failure))
}

/// The well-behaved module still answers correctly.
fn assert_webapp_works(webapp_module: &Module) {
    let outcome = call(webapp_module, &request(webapp("shop", 2, true))).expect("sandbox").expect("reconcile");
    let kinds: Vec<&str> = outcome.desired.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Deployment", "Service", "Ingress"]);
}

#[test]
fn a_guest_that_loops_forever_times_out() {
    let rt = runtime();
    let looping = load(&rt, "misbehave-loop").unwrap();
    let good = load(&rt, "rust-webapp").unwrap();
    let started = Instant::now();
    let err = call(&looping, &thing()).unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("timed out after 300ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "deadline not enforced: {:?}", started.elapsed());
    assert_webapp_works(&good);
}

#[test]
fn a_looping_guest_does_not_stall_others_running_at_the_same_time() {
    let rt = runtime();
    let looping = load(&rt, "misbehave-loop").unwrap();
    let good = load(&rt, "rust-webapp").unwrap();
    let spinner = std::thread::spawn(move || call(&looping, &thing()));
    for _ in 0..50 {
        assert_webapp_works(&good);
    }
    assert!(matches!(spinner.join().unwrap(), Err(CallError::Timeout { .. })));
}

#[test]
fn a_guest_that_grows_memory_without_bound_hits_the_cap() {
    let rt = runtime();
    let hog = load(&rt, "misbehave-memory").unwrap();
    let err = call(&hog, &thing()).unwrap_err();
    match &err {
        CallError::MemoryExceeded { limit, requested } => {
            assert_eq!(*limit, 32 << 20);
            assert!(*requested > *limit);
        }
        other => panic!("expected a memory error, got: {other}"),
    }
    assert!(err.to_string().contains("memory limit of 33554432 bytes"), "{err}");
    assert_webapp_works(&load(&rt, "rust-webapp").unwrap());
}

#[test]
fn a_guest_that_traps_reports_the_trap_and_its_stack() {
    let rt = runtime();
    let err = call(&load(&rt, "misbehave-trap").unwrap(), &thing()).unwrap_err();
    let CallError::Trap { trap: message, .. } = &err else { panic!("expected a trap, got: {err}") };
    assert!(message.contains("unreachable"), "{message}");
    assert!(message.contains("guest stack"), "{message}");
}

#[test]
fn a_guest_that_panics_is_a_trap_not_a_host_crash() {
    let rt = runtime();
    let err = call(&load(&rt, "misbehave-panic").unwrap(), &thing()).unwrap_err();
    assert!(matches!(err, CallError::Trap { .. }), "{err}");
    assert_webapp_works(&load(&rt, "rust-webapp").unwrap());
}

#[test]
fn a_guest_that_returns_invalid_json_is_malformed() {
    let rt = runtime();
    let err = call(&load(&rt, "misbehave-invalid-json").unwrap(), &thing()).unwrap_err();
    let CallError::Malformed(message) = &err else { panic!("expected malformed, got: {err}") };
    assert!(message.starts_with("desired[0] is not valid JSON"), "{message}");
}

#[test]
fn a_guest_that_returns_too_much_is_oversized() {
    let rt = runtime();
    let module = rt.load(&guest("misbehave-oversized"), Limits { memory: 128 << 20, ..limits() }).unwrap();
    let err = call(&module, &thing()).unwrap_err();
    match err {
        CallError::OutputTooLarge { size, limit } => {
            assert_eq!(limit, Limits::default().max_output);
            assert!(size > limit);
        }
        other => panic!("expected oversized, got: {other}"),
    }
}

/// The outcome cap holds at the crossing: wasmtime's hostcall fuel stops a
/// 20 MiB outcome while it is lifted, so the host never holds more than the
/// cap (and a small margin) of it.
#[test]
fn an_oversized_outcome_is_refused_before_the_host_holds_it() {
    let rt = runtime();
    let module = rt.load(&guest("misbehave-oversized"), Limits { memory: 128 << 20, ..limits() }).unwrap();
    match call(&module, &thing()).unwrap_err() {
        CallError::OutputTooLarge { size, limit } => {
            assert!(size < limit + (1 << 20), "the host lifted {size} bytes of a 20 MiB outcome before refusing it");
        }
        other => panic!("expected oversized, got: {other}"),
    }
}

#[test]
fn a_component_of_another_world_is_refused_at_load() {
    let rt = runtime();
    let err = load(&rt, "misbehave-wrong-world").err().expect("must not load");
    assert!(matches!(err, LoadError::WrongWorld(_)), "{err}");
    assert!(err.to_string().contains("operon:other/thing"), "{err}");
}

#[test]
fn a_component_with_the_wrong_signatures_is_refused_at_load() {
    let rt = runtime();
    let err = load(&rt, "misbehave-wrong-signature").err().expect("must not load");
    assert!(matches!(err, LoadError::Link(_)), "{err}");
    assert!(err.to_string().contains("does not match the operon:reconciler world"), "{err}");
}

#[test]
fn a_component_built_for_an_older_wit_major_is_refused_naming_both_versions() {
    let rt = runtime();
    let err = load(&rt, "misbehave-old-major").err().expect("must not load");
    let message = err.to_string();
    assert!(matches!(err, LoadError::WitVersion { .. }), "{message}");
    assert!(message.contains("operon:reconciler@0.0.1") && message.contains("operon:reconciler@0.1.0"), "{message}");
}

#[test]
fn a_manifest_that_traps_fails_the_load() {
    let rt = runtime();
    let err = load(&rt, "misbehave-manifest-trap").err().expect("must not load");
    assert!(matches!(err, LoadError::Manifest(_)), "{err}");
    assert!(err.to_string().contains("calling manifest() failed: trapped"), "{err}");
}

#[test]
fn bytes_that_are_not_a_component_are_refused_with_advice() {
    let rt = runtime();
    let err = rt.load(b"\0asm\x01\0\0\0", limits()).err().expect("must not load");
    assert!(err.to_string().contains("core wasm module"), "{err}");
    let err = rt.load(b"#!/bin/sh\necho hi\n", limits()).err().expect("must not load");
    assert!(matches!(err, LoadError::NotAComponent(_)), "{err}");
}

#[test]
fn reads_are_limited_to_declared_kinds() {
    let rt = runtime();
    let module = load(&rt, "misbehave-reader").unwrap();
    let result = call(&module, &thing()).expect("sandbox");
    // The guest reports the error of reading an undeclared kind as its failure.
    let Err(Failure::Transient(message)) = result else { panic!("expected a transient failure, got {result:?}") };
    assert!(message.contains("may not be read"), "{message}");
    assert!(message.contains("declare it in the manifest's `reads`"), "{message}");
}

#[test]
fn a_wasi_guest_gets_no_environment_no_files_no_sockets() {
    let rt = runtime();
    let module = load(&rt, "wasi-stdio").unwrap();
    assert!(module.info().uses_wasi);
    let outcome = call(&module, &thing()).expect("sandbox").expect("reconcile");
    let status = outcome.status.expect("the guest reports what it saw");
    assert_eq!(status["envCount"], 0, "{status}");
    assert!(status["fsError"].is_string(), "{status}");
    assert!(status["netError"].is_string(), "{status}");
}

#[test]
fn a_wasi_guest_that_panics_should_say_why_in_the_trap() {
    let rt = runtime();
    // Pooled (the default for WASI guests): what one call said must not
    // explain a later call's trap.
    let module = load(&rt, "wasi-stdio").unwrap();
    let panicking = request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "uid": "u"}, "spec": {"panic": "BUG: \u{1b}[31mempty\u{1b}[0m message"}}));
    let err = call(&module, &panicking).unwrap_err();
    let CallError::Trap { said, trap } = &err else { panic!("expected a trap, got: {err}") };
    assert_eq!(said.as_deref(), Some("BUG: empty message"), "the panic line, without its escape codes ({trap})");
    assert!(err.to_string().starts_with("trapped: BUG: empty message — "), "{err}");
    call(&module, &thing()).expect("sandbox").expect("the next call is well");
    let trap = call(&load(&rt, "misbehave-trap").unwrap(), &thing()).unwrap_err();
    assert!(matches!(&trap, CallError::Trap { said: None, .. }), "a guest that said nothing: {trap}");
}

#[test]
fn a_guest_without_wasi_imports_runs_without_a_wasi_context() {
    let rt = runtime();
    let module = load(&rt, "rust-webapp").unwrap();
    assert!(!module.info().uses_wasi);
    assert!(module.info().imports.iter().all(|i| i.starts_with("operon:reconciler/")), "{:?}", module.info().imports);
}

#[test]
fn pooled_instances_are_reused_and_trapped_ones_discarded() {
    let rt = runtime();
    let pooled = Limits { instance_policy: runtime::InstancePolicy::Pooled, pool_size: 2, ..limits() };
    let good = rt.load(&guest("rust-webapp"), pooled.clone()).unwrap();
    for _ in 0..20 {
        assert_webapp_works(&good);
    }
    let trap = rt.load(&guest("misbehave-trap"), pooled).unwrap();
    for _ in 0..3 {
        assert!(matches!(call(&trap, &thing()), Err(CallError::Trap { .. })));
    }
}

#[test]
fn compiled_modules_are_cached_on_disk_and_a_corrupt_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(runtime::Config { artifact_dir: Some(dir.path().into()), ..Default::default() }).unwrap();
    let first = rt.load(&guest("rust-webapp"), limits()).unwrap();
    assert!(!first.info().from_cache);
    let second = rt.load(&guest("rust-webapp"), limits()).unwrap();
    assert!(second.info().from_cache);
    assert_webapp_works(&second);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let third = rt.load(&guest("rust-webapp"), limits()).unwrap();
    assert!(!third.info().from_cache, "a corrupt artifact must not be used");
    assert_webapp_works(&third);
}

/// The artifact cache stays under its bound (`--artifact-cache-max-size`):
/// the least recently used modules go, and never one this host runs, even
/// when it is the oldest entry.
#[test]
fn the_artifact_cache_stays_under_its_bound_and_keeps_what_runs() {
    let used = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    let with_cache = |dir: &std::path::Path, max: u64| {
        Runtime::new(runtime::Config { artifact_dir: Some(dir.into()), artifact_cache_max: max, ..Default::default() })
            .unwrap()
    };
    // What each module takes in the cache (artifact, sum, kept bytes).
    let measured = tempfile::tempdir().unwrap();
    let rt = with_cache(measured.path(), 0);
    drop(rt.load(&guest("rust-webapp"), limits()).unwrap());
    let running = used(measured.path());
    drop(rt.load(&guest("stamp-v1"), limits()).unwrap());
    let stamp = used(measured.path()) - running;

    let dir = tempfile::tempdir().unwrap();
    let bound = running + stamp + stamp / 2;
    let rt = with_cache(dir.path(), bound);
    let webapp = rt.load(&guest("rust-webapp"), limits()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    drop(rt.load(&guest("stamp-v1"), limits()).unwrap());
    std::thread::sleep(Duration::from_millis(20));
    drop(rt.load(&guest("stamp-v2"), limits()).unwrap());
    let left = used(dir.path());
    assert!(left <= bound, "the cache holds {left} bytes, over its bound of {bound}");

    // A new runtime on the same directory: what is still cached loads
    // without compiling.
    let again = with_cache(dir.path(), 0);
    assert!(again.load(&guest("rust-webapp"), limits()).unwrap().info().from_cache, "the running module was evicted");
    assert!(again.load(&guest("stamp-v2"), limits()).unwrap().info().from_cache, "the newest entry was evicted");
    assert!(!again.load(&guest("stamp-v1"), limits()).unwrap().info().from_cache, "the least recently used stayed");
    assert_webapp_works(&webapp);
}

#[test]
fn a_wasi_guests_stdout_and_stderr_go_to_the_host_log() {
    let logs = crate::common::logs::capture();
    let rt = runtime();
    let module = load(&rt, "wasi-stdio").unwrap();
    call(&module, &thing()).expect("sandbox").expect("reconcile");
    let text = logs.text();
    let line = |needle: &str| text.lines().find(|l| l.contains(needle)).map(str::to_string);
    let stdout = line("hello on stdout").unwrap_or_else(|| panic!("stdout not logged:\n{text}"));
    assert!(stdout.contains("operon::guest") && stdout.contains("stdout"), "{stdout}");
    let stderr = line("hello on stderr").unwrap_or_else(|| panic!("stderr not logged:\n{text}"));
    assert!(stderr.contains("stderr"), "{stderr}");
}

#[test]
fn a_guest_that_writes_megabytes_is_rate_limited_never_stopped() {
    let logs = crate::common::logs::capture();
    let rt = runtime();
    let (rate, burst) = (200, 50);
    let limits = Limits { log_lines_per_second: rate, log_burst: burst, timeout: Duration::from_secs(20), ..limits() };
    let module = rt.load(&guest("wasi-stdio"), limits).unwrap();
    assert_eq!(module.limits().instance_policy, runtime::InstancePolicy::Pooled, "WASI guests are pooled by default");
    let flood = request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "uid": "u"}, "spec": {"flood": 8 << 20}}));
    let started = Instant::now();
    for _ in 0..2 {
        let outcome =
            call(&module, &flood).expect("the guest must not trap however much it writes").expect("reconcile");
        assert_eq!(outcome.status.unwrap()["flooded"], 8 << 20);
    }
    let allowed = f64::from(burst) + f64::from(rate) * started.elapsed().as_secs_f64() + 5.0;
    // 2 × 83,886 lines: all but what the rate allows are dropped, and counted.
    let dropped = module.dropped_log_lines();
    assert!(dropped as f64 >= 2.0 * 83_886.0 - allowed, "dropped {dropped}");
    let text = logs.text();
    let logged = text.lines().filter(|l| l.contains("xxxxxxxxxx")).count();
    assert!(logged as f64 <= allowed, "{logged} lines logged, {allowed} allowed");
    let announced = text.lines().filter(|l| l.contains("dropping lines until it slows down")).count();
    assert_eq!(announced, 1, "one episode, said once");
    // After a pause the guest's lines flow again, and the log says how many were lost.
    std::thread::sleep(Duration::from_millis(300));
    call(&module, &thing()).expect("sandbox").expect("reconcile");
    let text = logs.text();
    let reported = text.rfind("lines of guest output").expect("the drop count is never reported");
    assert!(text[reported..].contains("hello on stdout"), "lines did not resume after the report");
}

/// A reader with two ConfigMaps in the parent's namespace.
struct TwoConfigMaps;

impl runtime::ObjectReader for TwoConfigMaps {
    fn get(&self, _: &runtime::Gvk, _: Option<&str>, _: &str) -> Result<Option<String>, runtime::ReadError> {
        Ok(None)
    }
    fn list(&self, kind: &runtime::Gvk, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, runtime::ReadError> {
        assert_eq!(kind.kind, "ConfigMap");
        Ok(vec!["{}".into(), "{}".into()])
    }
}

#[test]
fn a_declared_kind_can_be_listed() {
    let rt = runtime();
    let module = load(&rt, "misbehave-reader").unwrap();
    let req = request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default"}, "spec": {"read": "list"}}));
    let outcome = module.reconcile(&req, Arc::new(TwoConfigMaps)).expect("sandbox").expect("reconcile");
    assert_eq!(outcome.status.unwrap()["configMapCount"], 2);
}

/// A Go guest on one pooled instance, called far more often than its heap
/// fills: Go's collector must never start inside `cabi_realloc` (where a
/// component may not call the WASI clock), or the call traps ("cannot leave
/// component instance") after a few hundred calls.
#[test]
fn a_go_guest_should_answer_thousands_of_calls_on_one_pooled_instance() {
    let rt = runtime();
    let limits = Limits {
        instance_policy: runtime::InstancePolicy::Pooled,
        pool_size: 1,
        timeout: Duration::from_secs(5),
        memory: 64 << 20,
        ..Limits::default()
    };
    let module = rt.load(&guest("go-webapp"), limits).expect("go-webapp loads");
    let req = request(webapp("shop", 2, true));
    for i in 0..3000 {
        let outcome = call(&module, &req).unwrap_or_else(|e| panic!("call {i} failed: {e}"));
        assert!(outcome.is_ok(), "call {i}: {outcome:?}");
    }
}

/// A reader whose `host.get` takes a while and counts how many calls are
/// inside it at once: how many guest calls run together.
#[derive(Default)]
struct Concurrency {
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl runtime::ObjectReader for Concurrency {
    fn get(&self, _: &runtime::Gvk, _: Option<&str>, _: &str) -> Result<Option<String>, runtime::ReadError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        self.inside.fetch_sub(1, SeqCst);
        Ok(None)
    }
    fn list(&self, _: &runtime::Gvk, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, runtime::ReadError> {
        Ok(Vec::new())
    }
}

/// Eight calls at once of the intruder guest (one `host.get` each) on
/// `gate`, each instance allowed `memory`: how many ran together.
fn most_at_once(gate: runtime::GateLimits, memory: u64) -> usize {
    let rt = Runtime::new(runtime::Config { artifact_dir: None, gate, ..Default::default() }).unwrap();
    let module =
        rt.load(&guest("intruder"), Limits { memory, timeout: Duration::from_secs(10), ..Limits::default() }).unwrap();
    let reader = Arc::new(Concurrency::default());
    let req = request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"mode": "read", "read": {"group": "", "version": "v1", "kind": "Namespace", "name": "x"}}}));
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (module, reader, req) = (module.clone(), reader.clone(), req.clone());
            s.spawn(move || {
                let outcome = module.reconcile(&req, reader).expect("sandbox").expect("reconcile");
                assert_eq!(outcome.status.unwrap()["read"], 0);
            });
        }
    });
    reader.most.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn the_host_gate_bounds_guest_memory_and_calls_across_every_caller() {
    // 800 MiB for the host, 400 MiB per instance: two calls at a time, not eight (3.2 GiB).
    assert_eq!(most_at_once(runtime::GateLimits { memory: 800 << 20, calls: 100 }, 400 << 20), 2);
    // Three call slots, whatever the memory.
    assert_eq!(most_at_once(runtime::GateLimits { memory: u64::MAX, calls: 3 }, 64 << 20), 3);
    // No limits: all eight together (the test can tell).
    assert_eq!(most_at_once(runtime::GateLimits::default(), 64 << 20), 8);
}

/// Issue #21: an idle module gives back its compiled code and instances, and
/// its next call loads them again from the artifact cache and answers the
/// same; a call in flight keeps what it uses.
#[test]
fn an_idle_module_is_unloaded_and_its_next_call_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(runtime::Config { artifact_dir: Some(dir.path().into()), ..Default::default() }).unwrap();
    let module = rt.load(&guest("rust-webapp"), limits()).unwrap();
    let req = request(webapp("shop", 2, true));
    let before = call(&module, &req).unwrap().unwrap();
    assert!(!module.unload_if_idle(Duration::from_secs(60)), "used a moment ago: not idle");
    assert!(module.unload_if_idle(Duration::ZERO));
    assert!(!module.is_loaded());
    assert!(module.admission() && module.conversion(), "what it exports is known while unloaded");
    let after = call(&module, &req).unwrap().unwrap();
    assert_eq!(before, after, "the reloaded module answers the same");
    assert!(module.is_loaded());
    let (unloads, reloads, took) = module.unload_stats();
    assert_eq!((unloads, reloads), (1, 1));
    eprintln!("reloaded from the artifact cache in {took:?}");
    // The runtime's sweep does the same for every module it loaded.
    assert_eq!(rt.unload_idle(Duration::ZERO), 1);
    assert_eq!(rt.unload_idle(Duration::ZERO), 0, "already unloaded");
}

/// Without an artifact cache there is nothing to load an idle module back
/// from: it is never unloaded.
#[test]
fn a_module_the_cache_cannot_give_back_is_never_unloaded() {
    let rt = runtime();
    let module = load(&rt, "rust-webapp").unwrap();
    assert!(!module.unload_if_idle(Duration::ZERO));
    assert!(module.is_loaded());
    assert_webapp_works(&module);
}

/// An egress that answers no call until `expected` calls wait on it at
/// once: only guests whose waits hold no thread can all get there.
struct Gathering {
    expected: usize,
    arrived: std::sync::atomic::AtomicUsize,
    all_here: tokio::sync::Notify,
}

impl runtime::Egress for Gathering {
    fn fetch(
        &self,
        _: operon::contract::egress::HttpRequest,
        _: Instant,
    ) -> futures::future::BoxFuture<
        '_,
        Result<operon::contract::egress::HttpResponse, operon::contract::egress::HttpError>,
    > {
        Box::pin(async move {
            let waiting = self.all_here.notified();
            if self.arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= self.expected {
                self.all_here.notify_waiters();
            } else {
                waiting.await;
            }
            Ok(operon::contract::egress::HttpResponse { status: 200, headers: Vec::new(), body: b"ok".to_vec() })
        })
    }
}

/// Guest calls are awaited, not run on threads of their own: on a runtime
/// of one thread, eight guests each waiting on an outbound call are all in
/// flight at once (a call that held the thread while it waited would keep
/// the others from starting, and every call would time out).
#[test]
fn guests_waiting_on_egress_should_hold_no_thread() {
    let rt = runtime();
    let probe =
        rt.load(&guest("egress-probe"), Limits { timeout: Duration::from_secs(10), ..Limits::default() }).unwrap();
    let one_thread = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let egress = Arc::new(Gathering {
        expected: 8,
        arrived: std::sync::atomic::AtomicUsize::new(0),
        all_here: tokio::sync::Notify::new(),
    });
    let thing = request(serde_json::json!({"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "uid": "u"},
        "spec": {"calls": [{"url": "https://api.example.com/"}]}}));
    let answers = one_thread.block_on(futures::future::join_all((0..8).map(|_| {
        let (probe, thing, egress) = (probe.clone(), thing.clone(), egress.clone());
        async move {
            let egress: Arc<dyn runtime::Egress> = egress;
            probe.admit().await.reconcile_async(&thing, Arc::new(NoObjects), Some(egress)).await
        }
    })));
    for answer in answers {
        let outcome = answer.expect("sandbox").expect("reconcile");
        let status = outcome.status.expect("a status");
        assert_eq!(status["results"][0]["status"], 200, "{status}");
    }
}

/// A guest that loops yields its thread at every epoch tick: on a runtime
/// of one thread, a well-behaved call made beside it ends long before the
/// looping one is stopped at its deadline.
#[test]
fn a_looping_guest_should_yield_its_thread_to_a_call_beside_it() {
    let rt = runtime();
    let looping = load(&rt, "misbehave-loop").unwrap();
    let good = load(&rt, "rust-webapp").unwrap();
    let one_thread = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ended = std::sync::Mutex::new(Vec::new());
    one_thread.block_on(async {
        let spin = async {
            let answer = looping.admit().await.reconcile_async(&thing(), Arc::new(NoObjects), None).await;
            assert!(matches!(answer, Err(CallError::Timeout { .. })), "{answer:?}");
            ended.lock().unwrap().push("looping");
        };
        let work = async {
            // Let the looping guest start first.
            tokio::task::yield_now().await;
            let webapp = request(webapp("shop", 2, true));
            let answer = good.admit().await.reconcile_async(&webapp, Arc::new(NoObjects), None).await;
            assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
            ended.lock().unwrap().push("well-behaved");
        };
        futures::join!(spin, work);
    });
    assert_eq!(*ended.lock().unwrap(), ["well-behaved", "looping"]);
}
