//! A loaded module version: compiled component, pre-linked instance
//! template, its manifest, and calls into it.

use super::call::{Calls, Slot};
use super::error::{CallError, LoadError};
use super::gate::Pass;
use super::guest::v0_1::V0_1;
use super::guest::v0_2::V0_2;
use super::guest::{CallScope, Contract, ObjectReader, RawFailure, RawOutcome, State};
use super::limits::Limits;
use super::stdio::GuestLog;
use super::{Runtime, WIT_PACKAGE};
use crate::contract::{Denial, Failed, Manifest, Outcome, Request, Review, WIT_VERSIONS_RUN};
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use wasmtime::Store;

/// Facts about a loaded module, for `operon inspect`, status and logs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleInfo {
    /// `sha256:<hex>` of the module bytes.
    pub digest: String,
    /// Size of the module in bytes.
    pub size: usize,
    /// The WIT package version the module was built against.
    pub wit_version: String,
    /// Every import of the component, by name.
    pub imports: Vec<String>,
    /// Every export of the component, by name.
    pub exports: Vec<String>,
    /// Whether the module imports WASI (and so runs with a WASI context).
    pub uses_wasi: bool,
    /// Time spent compiling, or loading the cached artifact.
    #[serde(serialize_with = "as_millis")]
    pub compile_time: Duration,
    /// Whether the compiled artifact came from the on-disk cache.
    pub from_cache: bool,
    /// What the module's `manifest()` returned.
    pub manifest: Manifest,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// One loaded module version. Cheap to clone; calls may run concurrently
/// from many threads.
#[derive(Clone)]
pub struct Module {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The engine (its epoch ticker runs while the module lives) and the
    /// artifact cache an idle module is loaded again from.
    pub(super) runtime: Runtime,
    pub(super) info: ModuleInfo,
    pub(super) manifest: Arc<Manifest>,
    /// What every call shares: engine, limits, output, peak memory.
    pub(super) calls: Calls,
    /// The compiled code and instance templates; `None` while unloaded for
    /// being idle ([`Module::unload_if_idle`]), loaded again from the
    /// artifact cache by the next call.
    pub(super) loaded: RwLock<Option<Arc<Loaded>>>,
    /// One reload at a time.
    pub(super) reloading: Mutex<()>,
    /// Whether the module exports admission / conversion (known unloaded).
    pub(super) admission: bool,
    pub(super) conversion: bool,
    /// When a call last began, in milliseconds since `born`.
    pub(super) last_used: AtomicU64,
    pub(super) born: Instant,
    /// Unloads and reloads so far, and the last reload's duration (µs).
    pub(super) unloads: AtomicU64,
    pub(super) reloads: AtomicU64,
    pub(super) last_reload_us: AtomicU64,
}

/// What a loaded module holds in memory: its compiled component (through
/// the instance templates) and the instance pools.
pub(super) struct Loaded {
    /// The module's worlds, of the contract version it was built for.
    pub(super) worlds: Box<dyn Worlds>,
    /// The conversion world (0.2), when the module exports `convert`.
    pub(super) conversion: Option<Slot<super::guest::v0_2::conversion_world::ReconcilerWithConversion>>,
}

impl Loaded {
    /// Pre-link `component` and make its call slots.
    pub(super) fn new(
        runtime: &Runtime,
        component: &wasmtime::component::Component,
        uses_wasi: bool,
        wit_version: &str,
        admission: bool,
        conversion: bool,
        limits: &Limits,
    ) -> Result<Loaded, LoadError> {
        let linker = if uses_wasi { &runtime.inner.wasi_linker } else { &runtime.inner.linker };
        let instance_pre = linker.instantiate_pre(component).map_err(LoadError::Link)?;
        let conversion = if conversion {
            let pre = super::guest::v0_2::conversion_world::ReconcilerWithConversionPre::new(instance_pre.clone())
                .map_err(LoadError::Link)?;
            Some(Slot::new(pre, limits, runtime.gate()))
        } else {
            None
        };
        let worlds: Box<dyn Worlds> = if operon_contract::compatible(wit_version, V0_2::VERSION) {
            Box::new(Slots::<V0_2>::new(instance_pre, admission, limits, runtime.gate())?)
        } else {
            Box::new(Slots::<V0_1>::new(instance_pre, admission, limits, runtime.gate())?)
        };
        Ok(Loaded { worlds, conversion })
    }
}

/// An admission call under way: the sandbox's verdict around the guest's
/// answer or denial.
type Reviewing<'a, T> = BoxFuture<'a, Result<Result<T, Denial>, CallError>>;

/// The worlds of one module — the reconciler world, and the admission
/// world when the module exports `validate`/`mutate` — of whichever
/// contract version it speaks, called through the one call path.
pub(super) trait Worlds: Send + Sync {
    /// Call `manifest`.
    fn manifest<'a>(&'a self, calls: &'a Calls, pass: &'a mut Pass) -> BoxFuture<'a, Result<Manifest, CallError>>;
    /// Call `reconcile`.
    fn reconcile<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        scope: CallScope,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<Result<RawOutcome, RawFailure>, CallError>>;
    /// Call `validate` (`None`: the module has no admission world).
    fn validate<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        scope: CallScope,
        deadline: Duration,
        review: &'a Review,
    ) -> Option<Reviewing<'a, Vec<String>>>;
    /// Call `mutate` (`None`: the module has no admission world).
    fn mutate<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        scope: CallScope,
        deadline: Duration,
        review: &'a Review,
    ) -> Option<Reviewing<'a, Option<String>>>;
}

struct Slots<C: Contract> {
    reconciler: Slot<C::Reconciler>,
    admission: Option<Slot<C::Admission>>,
}

impl<C: Contract> Slots<C> {
    fn new(
        pre: wasmtime::component::InstancePre<State>,
        admission: bool,
        limits: &Limits,
        gate: &super::Gate,
    ) -> Result<Slots<C>, LoadError> {
        // Admission's functions are type-checked here, so a module with a
        // wrong signature fails to load rather than at its first webhook call.
        let admission = match admission {
            true => Some(Slot::new(C::admission_pre(pre.clone()).map_err(LoadError::Link)?, limits, gate)),
            false => None,
        };
        let reconciler = Slot::new(C::reconciler_pre(pre).map_err(LoadError::Link)?, limits, gate);
        Ok(Slots { reconciler, admission })
    }
}

impl<C: Contract> Worlds for Slots<C> {
    fn manifest<'a>(&'a self, calls: &'a Calls, pass: &'a mut Pass) -> BoxFuture<'a, Result<Manifest, CallError>> {
        Box::pin(async move {
            let mut running = self.reconciler.begin(calls, pass, None, None).await?;
            let (b, store) = running.parts();
            let result = C::manifest(b, store).await;
            self.reconciler.finish(calls, pass, running, result)
        })
    }

    fn reconcile<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        mut scope: CallScope,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<Result<RawOutcome, RawFailure>, CallError>> {
        Box::pin(async move {
            if C::CLOCK {
                scope.now = Some(request.now);
            }
            let request = C::request(request);
            let mut running = self.reconciler.begin(calls, pass, Some(scope), None).await?;
            let (b, store) = running.parts();
            let result = C::reconcile(b, store, &request).await;
            self.reconciler.finish(calls, pass, running, result)
        })
    }

    fn validate<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        scope: CallScope,
        deadline: Duration,
        review: &'a Review,
    ) -> Option<Reviewing<'a, Vec<String>>> {
        let slot = self.admission.as_ref()?;
        Some(Box::pin(async move {
            let mut running = slot.begin(calls, pass, Some(scope), Some(deadline)).await?;
            let (b, store) = running.parts();
            let result = C::validate(b, store, review).await;
            slot.finish(calls, pass, running, result)
        }))
    }

    fn mutate<'a>(
        &'a self,
        calls: &'a Calls,
        pass: &'a mut Pass,
        scope: CallScope,
        deadline: Duration,
        review: &'a Review,
    ) -> Option<Reviewing<'a, Option<String>>> {
        let slot = self.admission.as_ref()?;
        Some(Box::pin(async move {
            let mut running = slot.begin(calls, pass, Some(scope), Some(deadline)).await?;
            let (b, store) = running.parts();
            let result = C::mutate(b, store, review).await;
            slot.finish(calls, pass, running, result)
        }))
    }
}

pub(super) fn load(runtime: &Runtime, bytes: &[u8], limits: Limits) -> Result<Module, LoadError> {
    if limits.memory > runtime.config().max_memory {
        return Err(LoadError::Limits(format!(
            "memory limit {} (spec.limits.memory) exceeds the host's maximum of {} bytes (--max-guest-memory-mib)",
            limits.memory,
            runtime.config().max_memory
        )));
    }
    check_header(bytes)?;
    let digest = super::digest(bytes);

    let started = Instant::now();
    let compiled = match &runtime.inner.artifacts {
        Some(cache) => cache.get_or_compile(runtime.engine(), &digest, bytes),
        None => {
            wasmtime::component::Component::new(runtime.engine(), bytes).map(|c| (c, false)).map_err(LoadError::Compile)
        }
    };
    let (component, from_cache) = compiled.map_err(|e| malformed_or(e, bytes))?;
    let compile_time = started.elapsed();

    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(runtime.engine()).map(|(n, _)| n.to_string()).collect();
    let export_names: Vec<String> = ty.exports(runtime.engine()).map(|(n, _)| n.to_string()).collect();
    let wit_version = check_world(&imports, &export_names)?;
    let uses_wasi = imports.iter().any(|i| i.starts_with("wasi:"));
    let limits = Limits { instance_policy: limits.instance_policy.resolve(uses_wasi, bytes.len()), ..limits };

    let admission = export_names.iter().any(|e| e.starts_with(&format!("{WIT_PACKAGE}/admission@")));
    let conversion = export_names.iter().any(|e| e.starts_with(&format!("{WIT_PACKAGE}/conversion@")));
    let loaded = Loaded::new(runtime, &component, uses_wasi, &wit_version, admission, conversion, &limits)?;
    let stdio = Arc::new(GuestLog::new(limits.log_lines_per_second, limits.log_burst));
    let module = Inner {
        runtime: runtime.clone(),
        info: ModuleInfo {
            digest,
            size: bytes.len(),
            wit_version,
            imports,
            exports: export_names,
            uses_wasi,
            compile_time,
            from_cache,
            manifest: placeholder_manifest(),
        },
        manifest: Arc::new(placeholder_manifest()),
        loaded: RwLock::new(Some(Arc::new(loaded))),
        reloading: Mutex::new(()),
        admission,
        conversion,
        last_used: AtomicU64::new(0),
        born: Instant::now(),
        unloads: AtomicU64::new(0),
        reloads: AtomicU64::new(0),
        last_reload_us: AtomicU64::new(0),
        calls: Calls {
            engine: runtime.engine().clone(),
            limits,
            uses_wasi,
            stdio,
            peak_memory: AtomicU64::new(0),
            gate: runtime.gate().clone(),
        },
    };

    // Smoke call: a module whose manifest() traps or lies never goes live.
    // Exports are type-checked at instantiation: a failure there (other than
    // a trap in a start function) is a world mismatch.
    let mut pass = module.calls.gate.admit_blocking(module.calls.limits.memory);
    let worlds = module.loaded.read().unwrap_or_else(|p| p.into_inner()).clone().expect("loaded at load");
    let manifest: Manifest =
        super::call::block_on(worlds.worlds.manifest(&module.calls, &mut pass)).map_err(|e| match e {
            CallError::Instantiate(e) => LoadError::Link(e),
            e => LoadError::Manifest(Box::new(e)),
        })?;
    manifest.validate().map_err(LoadError::InvalidManifest)?;
    drop(worlds);
    let mut module = module;
    module.calls.stdio.set_controller(&manifest.name);
    module.info.manifest = manifest.clone();
    module.manifest = Arc::new(manifest);
    Ok(Module { inner: Arc::new(module) })
}

fn placeholder_manifest() -> Manifest {
    Manifest {
        name: String::new(),
        for_kind: super::Gvk::new("", "", ""),
        owns: Vec::new(),
        watches: Vec::new(),
        reads: Vec::new(),
        finalizer: None,
        updates: Vec::new(),
    }
}

/// A compile error of bytes that are not valid WebAssembly is a malformed
/// module, not a compiler failure: say which (validated only after a
/// failure, so a good module pays nothing).
fn malformed_or(error: LoadError, bytes: &[u8]) -> LoadError {
    if !matches!(error, LoadError::Compile(_)) {
        return error;
    }
    let mut validator = wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all());
    match validator.validate_all(bytes) {
        Err(e) => LoadError::NotAComponent(format!("the component is not valid WebAssembly: {e}")),
        Ok(_) => error,
    }
}

/// Reject what is not a component before handing it to Cranelift, with a
/// message that says what to do.
fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotAComponent("the file does not start with the wasm magic number".into()));
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::NotAComponent(
            "this is a core wasm module; turn it into a component with `wasm-tools component new` \
             (or build for wasm32-wasip2)"
                .into(),
        ));
    }
    Ok(())
}

/// Check the component's imports and exports against the world and return
/// the WIT version it was built for.
fn check_world(imports: &[String], exports: &[String]) -> Result<String, LoadError> {
    let ours = |name: &str| -> Option<(String, String)> {
        let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
        let (iface, version) = rest.split_once('@')?;
        Some((iface.to_string(), version.to_string()))
    };
    // A version mismatch explains every later failure, so report it first;
    // one module speaks one version.
    let mut spoken: Option<String> = None;
    for name in imports.iter().chain(exports) {
        if let Some((_, version)) = ours(name) {
            if !WIT_VERSIONS_RUN.iter().any(|v| operon_contract::compatible(&version, v)) {
                return Err(LoadError::WitVersion {
                    package: WIT_PACKAGE,
                    found: version,
                    expected: WIT_VERSIONS_RUN.join(" or "),
                });
            }
            match &spoken {
                Some(v) if !operon_contract::compatible(&version, v) => {
                    return Err(LoadError::WitVersion {
                        package: WIT_PACKAGE,
                        found: format!("{v} and {version} at once"),
                        expected: WIT_VERSIONS_RUN.join(" or "),
                    });
                }
                _ => spoken = Some(version),
            }
        }
    }
    for name in imports {
        if ours(name).is_none() && !name.starts_with("wasi:") {
            return Err(LoadError::UnknownImport(name.clone()));
        }
    }
    let guest = exports.iter().find_map(|e| ours(e).filter(|(iface, _)| iface == "guest"));
    match guest {
        Some((_, version)) => Ok(version),
        None => Err(LoadError::WrongWorld(if exports.is_empty() {
            "it exports nothing".into()
        } else {
            format!("it exports {}", exports.join(", "))
        })),
    }
}

impl Module {
    /// Facts about the module.
    pub fn info(&self) -> &ModuleInfo {
        &self.inner.info
    }

    /// The manifest the module returned at load.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.inner.manifest
    }

    /// The limits the module runs under, with its instance policy resolved
    /// (never [`InstancePolicy::Auto`]).
    pub fn limits(&self) -> &Limits {
        &self.inner.calls.limits
    }

    /// The most linear memory one instance of the module has had so far, in
    /// bytes (the instances' memories together).
    pub fn peak_instance_memory(&self) -> u64 {
        self.inner.calls.peak_memory.load(Ordering::Relaxed)
    }

    /// Lines of WASI stdout/stderr dropped so far by the module's log rate
    /// ([`Limits::log_lines_per_second`]).
    pub fn dropped_log_lines(&self) -> u64 {
        self.inner.calls.stdio.dropped()
    }

    /// Wait for the host's gate to admit a call of this module (a call
    /// slot, and its memory limit reserved), without holding a thread.
    pub async fn admit(&self) -> Admitted {
        let pass = self.inner.calls.gate.admit(self.inner.calls.limits.memory).await;
        Admitted { module: self.clone(), pass }
    }

    /// [`Module::admit`], waiting on this (blocking-capable) thread.
    pub fn admit_blocking(&self) -> Admitted {
        let pass = self.inner.calls.gate.admit_blocking(self.inner.calls.limits.memory);
        Admitted { module: self.clone(), pass }
    }

    /// Whether the gate would admit a call now, and if not what is short.
    pub fn admissible(&self) -> Result<(), Shortage> {
        let gate = &self.inner.calls.gate;
        if gate.would_admit(self.inner.calls.limits.memory) {
            return Ok(());
        }
        let usage = gate.usage();
        Err(if usage.calls_in_flight >= usage.calls_limit { Shortage::Calls } else { Shortage::Memory })
    }

    /// How much of the host's gate is in use (every module's calls).
    pub fn gate_usage(&self) -> super::Usage {
        self.inner.calls.gate.usage()
    }

    /// Call `reconcile`, once the gate admits it ([`Admitted::reconcile`]).
    ///
    /// Blocks the calling thread while it waits and for at most the
    /// module's timeout: call it from a blocking-capable thread
    /// (`tokio::task::spawn_blocking`).
    pub fn reconcile(
        &self,
        request: &Request,
        reader: Arc<dyn ObjectReader>,
    ) -> Result<Result<Outcome, Failed>, CallError> {
        self.admit_blocking().reconcile(request, reader)
    }

    /// [`Module::reconcile`] with outbound HTTP through `egress` (`None`
    /// refuses every call).
    pub fn reconcile_with(
        &self,
        request: &Request,
        reader: Arc<dyn ObjectReader>,
        egress: Option<Arc<dyn super::Egress>>,
    ) -> Result<Result<Outcome, Failed>, CallError> {
        super::call::block_on(async { self.admit().await.reconcile_async(request, reader, egress).await })
    }
}

/// What the host's gate is short of, for a call it would not admit now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortage {
    /// Every call slot is taken (`--max-guest-calls`).
    Calls,
    /// The guest memory is reserved (`--max-guest-memory-total`).
    Memory,
}

impl Shortage {
    /// The flag that sets the limit.
    pub fn flag(self) -> &'static str {
        match self {
            Shortage::Calls => "--max-guest-calls",
            Shortage::Memory => "--max-guest-memory-total",
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Shortage::Calls => "calls",
            Shortage::Memory => "memory",
        }
    }
}

/// A module admitted by the host's gate: one call of it may run, holding
/// the gate's pass until it returns. `Send`: admitted on one thread, it may
/// be called on another.
pub struct Admitted {
    pub(super) module: Module,
    pub(super) pass: Pass,
}

impl Admitted {
    /// Call `reconcile`. The outer `Result` is the sandbox's verdict (did the
    /// guest run and answer well-formed JSON?); the inner one is the guest's
    /// own (did it reconcile, or fail transiently or terminally?).
    ///
    /// Blocks the calling thread for at most the module's timeout: call it
    /// from a blocking-capable thread (`tokio::task::spawn_blocking`).
    pub fn reconcile(
        self,
        request: &Request,
        reader: Arc<dyn ObjectReader>,
    ) -> Result<Result<Outcome, Failed>, CallError> {
        self.reconcile_with(request, reader, None)
    }

    /// [`Admitted::reconcile`] with outbound HTTP through `egress` (`None`
    /// refuses every call). The time the guest waits on it counts against
    /// the call's deadline.
    ///
    /// Blocks the calling thread for at most the module's timeout
    /// ([`Admitted::reconcile_async`] does not).
    pub fn reconcile_with(
        self,
        request: &Request,
        reader: Arc<dyn ObjectReader>,
        egress: Option<Arc<dyn super::Egress>>,
    ) -> Result<Result<Outcome, Failed>, CallError> {
        super::call::block_on(self.reconcile_async(request, reader, egress))
    }

    /// [`Admitted::reconcile_with`] on the task that awaits it: the guest
    /// runs on this task's thread and yields at every epoch tick, and while
    /// it waits on `egress` it holds no thread. Dropped before it ends, the
    /// call is cancelled (its instance is not reused).
    pub async fn reconcile_async(
        mut self,
        request: &Request,
        reader: Arc<dyn ObjectReader>,
        egress: Option<Arc<dyn super::Egress>>,
    ) -> Result<Result<Outcome, Failed>, CallError> {
        let module = self.module.clone();
        let inner = &module.inner;
        let loaded = module.loaded()?;
        let scope = CallScope::new(reader, Some(inner.manifest.clone())).with_egress(egress);
        let max = inner.calls.limits.max_output;
        match loaded.worlds.reconcile(&inner.calls, &mut self.pass, scope, request).await? {
            Ok(outcome) => convert_outcome(outcome, max, request.now).map(Ok),
            Err(RawFailure { failure, status, observed_generation }) => {
                check_size(failure.message().len() + status.as_ref().map_or(0, String::len), max)?;
                let status = status.as_deref().map(|s| parse_status(s, observed_generation)).transpose()?;
                Ok(Err(Failed { failure, status }))
            }
        }
    }
}

pub(super) fn classify(error: wasmtime::Error, store: &Store<State>, limits: &Limits) -> CallError {
    if let Some(requested) = store.data().limiter.exceeded {
        return CallError::MemoryExceeded { limit: limits.memory, requested };
    }
    // wasmtime's hostcall fuel: the guest handed over more than the outcome
    // cap allows in one crossing, refused while it was lifted.
    if error.chain().any(|e| e.to_string().contains("fuel allocated for hostcalls has been exhausted")) {
        let fuel = store.hostcall_fuel();
        return CallError::OutputTooLarge { size: fuel, limit: limits.max_output };
    }
    let backtrace = error.downcast_ref::<wasmtime::WasmBacktrace>();
    let said = || store.data().said.last_words();
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => CallError::Timeout { limit: limits.timeout },
        Some(trap) => CallError::Trap { trap: describe_trap(&trap.to_string(), backtrace), said: said() },
        None if backtrace.is_some() => {
            CallError::Trap { trap: describe_trap(&error.root_cause().to_string(), backtrace), said: said() }
        }
        None => CallError::Instantiate(error),
    }
}

/// The trap's message and the guest's frames (function names when the
/// module kept its name section), without the host's own stack.
fn describe_trap(message: &str, backtrace: Option<&wasmtime::WasmBacktrace>) -> String {
    let mut text = message.trim_start_matches("wasm trap: ").to_string();
    if let Some(bt) = backtrace {
        let frames: Vec<String> = bt
            .frames()
            .iter()
            .take(12)
            .map(|f| f.func_name().map_or_else(|| format!("<func {}>", f.func_index()), demangle))
            .collect();
        if !frames.is_empty() {
            text.push_str(" (guest stack: ");
            text.push_str(&frames.join(" <- "));
            text.push(')');
        }
    }
    text
}

/// Demangled, without the hash suffix (`{:#}`), so a guest author sees
/// `my_guest::reconcile` rather than `_ZN8my_guest9reconcile17h…E`.
fn demangle(name: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(name))
}

pub(super) fn check_size(size: usize, limit: usize) -> Result<(), CallError> {
    if size > limit {
        return Err(CallError::OutputTooLarge { size, limit });
    }
    Ok(())
}

/// A status as the guest wrote it: a JSON object; with `observed` (0.2),
/// `observedGeneration` set to it unless the guest set it.
fn parse_status(text: &str, observed: Option<i64>) -> Result<Value, CallError> {
    match serde_json::from_str::<Value>(text) {
        Ok(mut status @ Value::Object(_)) => {
            crate::contract::observe_generation(&mut status, observed);
            Ok(status)
        }
        Ok(_) => Err(CallError::Malformed("status is not a JSON object".into())),
        Err(e) => Err(CallError::Malformed(format!("status is not valid JSON: {e}"))),
    }
}

/// Check sizes and parse every JSON text of an outcome; `requeue-at` is
/// measured from the request's `now`.
fn convert_outcome(o: RawOutcome, max_output: usize, now: jiff::Timestamp) -> Result<Outcome, CallError> {
    let size = o.desired.iter().map(String::len).sum::<usize>()
        + o.status.as_ref().map_or(0, String::len)
        + o.events.iter().map(|e| e.reason.len() + e.message.len()).sum::<usize>();
    check_size(size, max_output)?;
    let desired = o
        .desired
        .iter()
        .enumerate()
        .map(|(i, text)| parse_object(text).map_err(|e| CallError::Malformed(format!("desired[{i}] {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let status = o.status.as_deref().map(|s| parse_status(s, o.observed_generation)).transpose()?;
    let requeue_after = crate::contract::requeue_after(o.requeue_after_ms, o.requeue_at.as_deref(), now)
        .map_err(CallError::Malformed)?;
    if let Some(m) = &o.parent_metadata {
        let size: usize = m.labels.iter().chain(&m.annotations).map(|(k, v)| k.len() + v.len()).sum();
        check_size(size, max_output)?;
    }
    Ok(Outcome {
        desired,
        status,
        events: o.events,
        requeue_after,
        finalized: o.finalized,
        needs_finalizer: o.needs_finalizer,
        parent_metadata: o.parent_metadata,
    })
}

/// The outcome check as the fuzz targets in `fuzz/` drive it: the raw parts
/// of a WIT `outcome` in, the checked [`Outcome`] or the [`CallError`] out.
/// Not an API.
#[doc(hidden)]
pub fn fuzz_outcome(
    desired: Vec<String>,
    status: Option<String>,
    events: Vec<(bool, String, String)>,
    requeue_after_ms: Option<u64>,
    max_output: usize,
) -> Result<Outcome, CallError> {
    let events = events
        .into_iter()
        .map(|(warning, reason, message)| crate::contract::Event { warning, reason, message })
        .collect();
    let raw = RawOutcome {
        desired,
        status,
        events,
        requeue_after_ms,
        requeue_at: None,
        finalized: false,
        observed_generation: None,
        needs_finalizer: None,
        parent_metadata: None,
    };
    convert_outcome(raw, max_output, jiff::Timestamp::UNIX_EPOCH)
}

/// Parse one desired object and check it names itself.
fn parse_object(text: &str) -> Result<Value, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"))?;
    let has_str = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if !value.is_object() {
        return Err("is not a JSON object".into());
    }
    if !has_str(value.get("apiVersion")) || !has_str(value.get("kind")) {
        return Err("lacks apiVersion or kind".into());
    }
    if !has_str(value.pointer("/metadata/name")) {
        return Err(format!(
            "({} {}) lacks metadata.name",
            value["apiVersion"].as_str().unwrap_or_default(),
            value["kind"].as_str().unwrap_or_default()
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_check_names_both_versions() {
        let err = check_world(&[], &["operon:reconciler/guest@0.0.1".into()]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("operon:reconciler@0.0.1") && msg.contains("operon:reconciler@0.1.0"), "{msg}");
    }

    #[test]
    fn world_check_rejects_foreign_imports_and_missing_exports() {
        let err = check_world(&["env:x/y".into()], &["operon:reconciler/guest@0.1.0".into()]).unwrap_err();
        assert!(matches!(err, LoadError::UnknownImport(_)), "{err}");
        let err = check_world(&[], &["run".into()]).unwrap_err();
        assert!(err.to_string().contains("it exports run"), "{err}");
    }

    #[test]
    fn header_check_explains_core_modules() {
        let core = b"\0asm\x01\0\0\0";
        assert!(check_header(core).unwrap_err().to_string().contains("wasm-tools component new"));
        assert!(check_header(b"hello world").is_err());
    }

    #[test]
    fn observed_generation_should_be_set_for_0_2_unless_the_guest_set_it() {
        assert_eq!(parse_status(r#"{"ready":true}"#, Some(3)).unwrap()["observedGeneration"], 3);
        assert_eq!(parse_status(r#"{"observedGeneration":1}"#, Some(3)).unwrap()["observedGeneration"], 1);
        assert!(parse_status(r#"{"a":1}"#, None).unwrap().get("observedGeneration").is_none());
        assert!(parse_status("[1]", Some(3)).is_err());
    }

    #[test]
    fn desired_objects_must_name_themselves() {
        assert!(parse_object(r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}"#).is_ok());
        assert!(
            parse_object(r#"{"apiVersion":"v1","kind":"Service","metadata":{}}"#)
                .unwrap_err()
                .contains("metadata.name")
        );
        assert!(parse_object(r#"{"kind":"Service"}"#).unwrap_err().contains("apiVersion"));
        assert!(parse_object("[1]").unwrap_err().contains("not a JSON object"));
        assert!(parse_object("{\"apiVersion\":").unwrap_err().contains("not valid JSON"));
    }
}
