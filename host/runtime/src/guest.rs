//! The host side of the WIT worlds: the per-store state, the
//! `operon:reconciler/host` import, and the guest's reads. Each contract
//! version the host runs has its generated bindings and conversions in a
//! module of its own ([`v0_1`], [`v0_2`]), behind one [`Contract`] trait,
//! so the call path, the sandbox and the reads are written once.

use super::stdio::{GuestLog, GuestStream, Said, Stream};
use crate::contract::egress::{HttpError, HttpRequest, HttpResponse};
use crate::contract::{self as host_types, Denial, Gvk, Manifest, Request, Review};
use futures::future::BoxFuture;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;
use wasmtime::Store;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub(crate) mod v0_1;
pub(crate) mod v0_2;

/// One version of the contract, as the host calls it: its worlds, and
/// conversions from and to the contract's plain types.
pub(crate) trait Contract: Send + Sync + 'static {
    /// The `reconciler` world.
    type Reconciler: super::call::World;
    /// The `reconciler-with-admission` world.
    type Admission: super::call::World;
    /// The version, as the package names it.
    const VERSION: &'static str;
    /// Whether the request carries the clock (WASI's wall clock then
    /// answers it during the call).
    const CLOCK: bool;
    /// Templates of both worlds from the module's pre-linked instance.
    fn reconciler_pre(
        pre: wasmtime::component::InstancePre<State>,
    ) -> wasmtime::Result<<Self::Reconciler as super::call::World>::Pre>;
    /// The template of the admission world.
    fn admission_pre(
        pre: wasmtime::component::InstancePre<State>,
    ) -> wasmtime::Result<<Self::Admission as super::call::World>::Pre>;
    /// Call `manifest`.
    fn manifest(
        b: &Self::Reconciler,
        store: &mut Store<State>,
    ) -> impl Future<Output = wasmtime::Result<Manifest>> + Send;
    /// The request in this version's form, made before the call (outside
    /// its deadline).
    type Request: Send + Sync;
    /// Convert a request.
    fn request(r: &Request) -> Self::Request;
    /// Call `reconcile`: the outcome's raw parts, or the guest's failure.
    fn reconcile(
        b: &Self::Reconciler,
        store: &mut Store<State>,
        r: &Self::Request,
    ) -> impl Future<Output = wasmtime::Result<Result<RawOutcome, RawFailure>>> + Send;
    /// Call `validate`.
    fn validate(
        b: &Self::Admission,
        store: &mut Store<State>,
        r: &Review,
    ) -> impl Future<Output = wasmtime::Result<Result<Vec<String>, Denial>>> + Send;
    /// Call `mutate`.
    fn mutate(
        b: &Self::Admission,
        store: &mut Store<State>,
        r: &Review,
    ) -> impl Future<Output = wasmtime::Result<Result<Option<String>, Denial>>> + Send;
}

/// An outcome as it crossed, before the host checks it (sizes, JSON,
/// times): the same for every contract version.
pub(crate) struct RawOutcome {
    pub desired: Vec<String>,
    pub status: Option<String>,
    pub events: Vec<host_types::Event>,
    pub requeue_after_ms: Option<u64>,
    /// RFC 3339 (0.2).
    pub requeue_at: Option<String>,
    pub finalized: bool,
    /// 0.2: the parent's generation, set as the status's
    /// `observedGeneration` unless the guest set it.
    pub observed_generation: Option<i64>,
    /// 0.2: `None` for 0.1.
    pub needs_finalizer: Option<bool>,
    pub parent_metadata: Option<host_types::ParentMetadata>,
}

/// A failure as it crossed: the status, if any, not yet checked.
pub(crate) struct RawFailure {
    pub failure: host_types::Failure,
    pub status: Option<String>,
    /// As [`RawOutcome::observed_generation`].
    pub observed_generation: Option<i64>,
}

/// What every version's generated module (holding
/// `operon::reconciler::{host, types}`, the `Reconciler` world and
/// `admission_world`) needs the same: the `host` import, the shared types'
/// conversions, the worlds' templates and the admission calls — so every
/// version answers reads, logs and reviews the same way.
macro_rules! host_import {
    () => {
        use self::operon::reconciler::host as wit_host;
        use self::operon::reconciler::types as wit;

        impl wit::Host for $crate::guest::State {}

        impl wit_host::Host for $crate::guest::State {
            fn log(&mut self, level: wit_host::Level, message: String, fields: Vec<(String, String)>) {
                let level = match level {
                    wit_host::Level::Trace => tracing::Level::TRACE,
                    wit_host::Level::Debug => tracing::Level::DEBUG,
                    wit_host::Level::Info => tracing::Level::INFO,
                    wit_host::Level::Warn => tracing::Level::WARN,
                    wit_host::Level::Error => tracing::Level::ERROR,
                };
                self.guest_log(level, &message, &fields);
            }

            // The WIT's `result<_, string>`: the guest reads the message.
            fn get(&mut self, r: wit::ObjectRef) -> Result<Option<String>, String> {
                self.guest_get(&Gvk::from(r.kind), r.namespace.as_deref(), &r.name).map_err(|e| e.to_string())
            }

            fn list(
                &mut self,
                kind: wit::Gvk,
                namespace: Option<String>,
                label_selector: Option<String>,
            ) -> Result<Vec<String>, String> {
                self.guest_list(&Gvk::from(kind), namespace.as_deref(), label_selector.as_deref())
                    .map_err(|e| e.to_string())
            }
        }

        impl From<wit::Gvk> for Gvk {
            fn from(g: wit::Gvk) -> Gvk {
                Gvk { group: g.group, version: g.version, kind: g.kind }
            }
        }

        impl From<&Gvk> for wit::Gvk {
            fn from(g: &Gvk) -> wit::Gvk {
                wit::Gvk { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
            }
        }

        /// A review in this version's form.
        fn review(r: &crate::contract::Review) -> admission::Review {
            use crate::contract::Operation;
            admission::Review {
                uid: r.uid.clone(),
                operation: match r.operation {
                    Operation::Create => admission::Operation::Create,
                    Operation::Update => admission::Operation::Update,
                    Operation::Delete => admission::Operation::Delete,
                    Operation::Connect => admission::Operation::Connect,
                },
                kind: (&r.kind).into(),
                sub_resource: r.sub_resource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                object: r.object.clone(),
                old_object: r.old_object.clone(),
                user_info: admission::UserInfo {
                    username: r.user_info.username.clone(),
                    uid: r.user_info.uid.clone(),
                    groups: r.user_info.groups.clone(),
                },
                dry_run: r.dry_run,
            }
        }

        fn denial(d: admission::Denial) -> crate::contract::Denial {
            crate::contract::Denial { message: d.message, code: d.code }
        }

        fn events(events: Vec<wit::Event>) -> Vec<crate::contract::Event> {
            events
                .into_iter()
                .map(|e| crate::contract::Event { warning: e.warning, reason: e.reason, message: e.message })
                .collect()
        }

        /// Add this version's `host` import to `linker`.
        pub(crate) fn add_to_linker(
            linker: &mut wasmtime::component::Linker<crate::guest::State>,
        ) -> wasmtime::Result<()> {
            Reconciler::add_to_linker::<crate::guest::State, wasmtime::component::HasSelf<crate::guest::State>>(
                linker,
                |s| s,
            )
        }

        impl crate::call::World for Reconciler {
            type Pre = ReconcilerPre<crate::guest::State>;
            async fn instantiate(
                pre: &Self::Pre,
                store: &mut wasmtime::Store<crate::guest::State>,
            ) -> wasmtime::Result<Self> {
                pre.instantiate_async(store).await
            }
        }

        impl crate::call::World for admission_world::ReconcilerWithAdmission {
            type Pre = admission_world::ReconcilerWithAdmissionPre<crate::guest::State>;
            async fn instantiate(
                pre: &Self::Pre,
                store: &mut wasmtime::Store<crate::guest::State>,
            ) -> wasmtime::Result<Self> {
                pre.instantiate_async(store).await
            }
        }

        async fn validate(
            b: &admission_world::ReconcilerWithAdmission,
            store: &mut wasmtime::Store<crate::guest::State>,
            r: &crate::contract::Review,
        ) -> wasmtime::Result<Result<Vec<String>, crate::contract::Denial>> {
            Ok(b.operon_reconciler_admission().call_validate(store, &review(r)).await?.map_err(denial))
        }

        async fn mutate(
            b: &admission_world::ReconcilerWithAdmission,
            store: &mut wasmtime::Store<crate::guest::State>,
            r: &crate::contract::Review,
        ) -> wasmtime::Result<Result<Option<String>, crate::contract::Denial>> {
            Ok(b.operon_reconciler_admission().call_mutate(store, &review(r)).await?.map_err(denial))
        }
    };
}
pub(crate) use host_import;

/// Why a guest's read was refused. The guest sees the message (the WIT
/// `host.get`/`host.list` error); it says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The kind is not cached for this controller.
    #[error("{0} is not cached for this controller")]
    NotCached(Gvk),
    /// The namespace is outside the controller's.
    #[error("namespace {namespace:?} is outside this controller's namespaces ({scope})")]
    OutsideScope {
        /// The namespace asked for.
        namespace: String,
        /// The namespaces it may read.
        scope: String,
    },
    /// A cluster-scoped kind, read by a controller whose scope holds no
    /// cluster-scoped objects (a namespaced Reconciler, or a
    /// ClusterReconciler without `spec.grants.clusterScoped`).
    #[error(
        "{0} is cluster-scoped, and this controller reads only in its namespaces: a Reconciler acts in its own \
         namespace (use a ClusterReconciler with spec.grants.clusterScoped to read cluster-scoped kinds)"
    )]
    ClusterScoped(Gvk),
    /// A kind no plugin may read (the host's own and the cluster's access
    /// control).
    #[error("{kind} may not be read by any plugin ({why})")]
    Reserved {
        /// The kind asked for.
        kind: Gvk,
        /// Why it is reserved.
        why: String,
    },
    /// A list across every namespace by a controller that may not read them all.
    #[error("listing a namespaced kind across all namespaces is outside this controller's namespaces")]
    AllNamespaces,
    /// The label selector does not parse.
    #[error("{0}")]
    Selector(String),
    /// The kind is not declared (or granted) for reading.
    #[error("{kind} may not be read: declare it in the manifest's `reads` (this module may read {readable})")]
    NotDeclared {
        /// The kind asked for.
        kind: Gvk,
        /// What it may read.
        readable: String,
    },
    /// Reads are not allowed in this call.
    #[error("no reads are allowed while loading the module")]
    Loading,
    /// The call's read budget is spent.
    #[error("read budget exhausted: {0}")]
    Budget(&'static str),
}

/// Read access to cluster objects for a guest, scoped to one reconcile.
///
/// Implemented by the informer cache (in a controller) and by fixtures (in
/// `operon test`). The runtime checks read grants before calling it, so an
/// implementation only resolves the request.
pub trait ObjectReader: Send + Sync {
    /// One object as JSON, `Ok(None)` if absent. `namespace` is what the
    /// guest passed: `None` means the parent's namespace for namespaced kinds.
    ///
    /// # Errors
    /// [`ReadError`] when the read is outside what the reader may answer.
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, ReadError>;
    /// Objects of a kind as JSON, filtered by a label selector.
    ///
    /// # Errors
    /// [`ReadError`] when the read is outside what the reader may answer.
    fn list(&self, kind: &Gvk, namespace: Option<&str>, label_selector: Option<&str>)
    -> Result<Vec<String>, ReadError>;

    /// [`ObjectReader::list`] within `max_bytes` of JSON: a reader that can
    /// stop early (the cache) refuses as soon as the objects exceed it,
    /// before copying the rest. The default lists, then checks.
    ///
    /// # Errors
    /// As `list`, and [`ReadError::Budget`] past `max_bytes`.
    fn list_within(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<String>, ReadError> {
        let found = self.list(kind, namespace, label_selector)?;
        if found.iter().map(String::len).sum::<usize>() > max_bytes {
            return Err(ReadError::Budget(READ_BUDGET_SPENT));
        }
        Ok(found)
    }
}

/// What a guest is told when its reads pass [`MAX_READ_BYTES`] in one call.
pub const READ_BUDGET_SPENT: &str = "host.get/host.list returned more than 64 MiB in one call (the host's limit); \
                                     narrow the reads with a namespace or a label selector";

/// Outbound HTTP for a guest, during one reconcile (the WIT `egress`
/// import, contract 0.2).
///
/// Implemented by the host (grants, credentials, bounds, recording: the
/// `egress` module of the `operon` crate) and by a recording's replay
/// ([`crate::contract::egress::Replay`], in `operon test` and for a shadow
/// candidate). The runtime only carries the call across: it never makes
/// one itself.
pub trait Egress: Send + Sync {
    /// Make one call, answering by `deadline` (what remains of the guest
    /// call's deadline) at the latest. Awaited by the guest's call: the
    /// guest waits, and no thread is held meanwhile.
    ///
    /// # Errors
    /// Why no answer came, for the guest.
    fn fetch(&self, request: HttpRequest, deadline: Instant) -> BoxFuture<'_, Result<HttpResponse, HttpError>>;
}

impl Egress for crate::contract::egress::Replay {
    fn fetch(&self, request: HttpRequest, _: Instant) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        Box::pin(std::future::ready(crate::contract::egress::Replay::fetch(self, &request)))
    }
}

/// Egress refused, with why: for calls that may make none (loading,
/// admission, conversion) and plugins granted none.
pub struct NoEgress(pub &'static str);

impl NoEgress {
    fn refuse(&self, request: &HttpRequest) -> HttpError {
        HttpError::Denied(format!("{}: {}", crate::contract::egress::describe(request), self.0))
    }
}

impl Egress for NoEgress {
    fn fetch(&self, request: HttpRequest, _: Instant) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        Box::pin(std::future::ready(Err(self.refuse(&request))))
    }
}

/// A reader that sees nothing: for the load-time smoke call and for tools.
pub struct NoObjects;

impl ObjectReader for NoObjects {
    fn get(&self, _: &Gvk, _: Option<&str>, _: &str) -> Result<Option<String>, ReadError> {
        Ok(None)
    }
    fn list(&self, _: &Gvk, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, ReadError> {
        Ok(Vec::new())
    }
}

/// Everything a `Store` carries for one guest instance.
pub(crate) struct State {
    pub limiter: Limiter,
    /// The reader and grants for the call in progress.
    pub scope: Option<CallScope>,
    /// Present only for guests that import WASI.
    pub wasi: Option<WasiState>,
    /// What the guest said during the current call (stderr, error logs),
    /// for a trap's explanation.
    pub said: Said,
    /// The module's log: `host.log` lines go there, within its rate.
    log: Arc<GuestLog>,
    /// `host.log` calls made in the current call.
    logged: u32,
    /// The call's pass of the host's gate and the gate, while a call runs:
    /// lent back while the guest waits on an egress call.
    pub gate: Option<(super::gate::Pass, super::gate::Gate)>,
}

impl State {
    /// The state of a new store: `memory` caps it; `host.log` (and, with
    /// `wasi`, a WASI context's stdout and stderr) go to `log`.
    pub fn new(memory: u64, scope: Option<CallScope>, log: &Arc<GuestLog>, wasi: bool) -> State {
        let said = Said::default();
        let wasi = wasi.then(|| WasiState::new(log, &said));
        State { limiter: Limiter::new(memory), scope, wasi, said, log: log.clone(), logged: 0, gate: None }
    }

    /// Reset what one call tracks, before the call: the memory cap's flag,
    /// what the guest said and how often it logged (a pooled instance
    /// serves many calls).
    pub fn begin_call(&mut self) {
        self.limiter.exceeded = None;
        self.said.clear();
        self.logged = 0;
        let now = self.scope.as_ref().and_then(|s| s.now);
        if let Some(wasi) = &self.wasi {
            wasi.clock.0.store(now.map_or(REAL_TIME, |t| t.as_nanosecond() as i64), Ordering::Relaxed);
        }
    }

    /// `host.log`: within the module's log rate and the call's budget of
    /// lines, made plain and bounded (`stdio.rs`).
    fn guest_log(&mut self, level: tracing::Level, message: &str, fields: &[(String, String)]) {
        self.logged = self.logged.saturating_add(1);
        if level == tracing::Level::ERROR {
            // A Rust guest's panic hook reports here before it traps
            // (kept bounded and sanitised, whatever the log drops).
            self.said.push(message);
        }
        self.log.message(level, message, fields, self.logged);
    }

    /// `host.get`, within the call's grants and read budget.
    fn guest_get(&mut self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, ReadError> {
        self.charge(1, 0)?;
        let scope = self.readable(kind)?;
        let found = scope.reader.get(kind, namespace, name)?;
        self.charge(0, found.as_ref().map_or(0, String::len))?;
        Ok(found)
    }

    /// `host.list`, within the call's grants and read budget.
    fn guest_list(
        &mut self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        self.charge(1, 0)?;
        let scope = self.readable(kind)?;
        let left = MAX_READ_BYTES.saturating_sub(scope.reads.1);
        let found = scope.reader.list_within(kind, namespace, label_selector, left)?;
        self.charge(0, found.iter().map(String::len).sum())?;
        Ok(found)
    }
}

/// Most `host.get`/`host.list` calls one guest call may make (the
/// [`ReadError::Budget`] message says 1000).
pub(crate) const MAX_HOST_CALLS: u32 = 1000;
/// Most bytes of objects those calls may return in one guest call (the
/// [`ReadError::Budget`] message says 64 MiB).
pub(crate) const MAX_READ_BYTES: usize = 64 << 20;

/// What a guest may read during one call.
pub(crate) struct CallScope {
    pub reader: Arc<dyn ObjectReader>,
    pub manifest: Option<Arc<host_types::Manifest>>,
    /// The request's clock (0.2): what WASI's wall clock answers during the
    /// call. `None`: the real time.
    pub now: Option<jiff::Timestamp>,
    /// Host calls made and bytes they returned so far in this call (the
    /// read budget).
    pub reads: (u32, usize),
    /// Outbound HTTP: `None` refuses every call.
    pub egress: Option<Arc<dyn Egress>>,
    /// When the guest call's deadline passes: what an egress call may wait
    /// for at most (set by `Slot::call`).
    pub deadline: Option<Instant>,
}

impl CallScope {
    pub fn new(reader: Arc<dyn ObjectReader>, manifest: Option<Arc<host_types::Manifest>>) -> CallScope {
        CallScope { reader, manifest, now: None, reads: (0, 0), egress: None, deadline: None }
    }

    /// This scope, with outbound HTTP through `egress`.
    pub fn with_egress(mut self, egress: Option<Arc<dyn Egress>>) -> CallScope {
        self.egress = egress;
        self
    }
}

/// What a guest's egress call is told when the call may make none.
const NO_EGRESS_HERE: &str = "only reconcile calls may call out (not manifest, admission or conversion calls)";

impl State {
    /// `egress.fetch`: through the call's egress, by its deadline.
    pub(crate) async fn guest_fetch(&mut self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let Some(egress) = self.scope.as_ref().and_then(|s| s.egress.clone()) else {
            return Err(NoEgress(NO_EGRESS_HERE).refuse(&request));
        };
        // Every crossing is a host call: a guest looping on calls (refused
        // ones too) spends the call's budget like one looping on reads.
        if let Err(ReadError::Budget(why)) = self.charge(1, 0) {
            return Err(HttpError::Budget(why.to_string()));
        }
        let deadline = self.scope.as_ref().and_then(|s| s.deadline);
        let deadline = deadline.unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(1));
        // Waiting, the guest runs nothing and cannot grow: its slot and the
        // memory it has not grown to go back to the gate meanwhile, so a
        // slow API holds up no neighbour; taken back (within the deadline)
        // when it goes on, its growth capped at what it holds again.
        let lent = self.gate.as_mut().map(|(pass, _)| pass.lend(self.limiter.used));
        let answer = egress.fetch(request, deadline).await;
        if let (Some(lent), Some((pass, gate))) = (lent, self.gate.as_mut()) {
            gate.take_back(pass, lent, deadline.saturating_duration_since(Instant::now())).await;
            if gate.limits().memory != u64::MAX {
                self.limiter.memory = self.limiter.memory.min(pass.reserved().max(self.limiter.used));
            }
        }
        answer
    }
}

/// WASI context with nothing granted but clocks and randomness; stdout and
/// stderr stream to the host's log (`stdio.rs`), never inherited.
pub(crate) struct WasiState {
    /// What the wall clock answers (shared with the context's clock).
    clock: CallClock,
    ctx: WasiCtx,
    table: ResourceTable,
    stdout: GuestStream,
    stderr: GuestStream,
}

impl WasiState {
    pub fn new(log: &Arc<GuestLog>, said: &Said) -> WasiState {
        let stdout = GuestStream::new(log.clone(), Stream::Stdout);
        let stderr = GuestStream::new(log.clone(), Stream::Stderr).keeping(said.clone());
        let clock = CallClock(Arc::new(AtomicI64::new(REAL_TIME)));
        // No preopens, no environment, no arguments, no sockets.
        let ctx = WasiCtx::builder()
            .wall_clock(clock.clone())
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        WasiState { clock, ctx, table: ResourceTable::new(), stdout, stderr }
    }

    /// Log the lines the guest left unfinished (at the end of a call):
    /// complete lines were logged as they were written.
    pub fn flush(&mut self) {
        self.stdout.finish_line();
        self.stderr.finish_line();
    }
}

/// [`CallClock`]'s value for "the real time".
const REAL_TIME: i64 = i64::MIN;

/// WASI's wall clock for a guest: the request's `now` during a reconcile of
/// a 0.2 module (one value for the whole call, as the guest's request says),
/// the real time otherwise. The monotonic clock is left running: runtimes
/// measure and schedule with it, and a frozen one would hang their sleeps.
#[derive(Clone)]
struct CallClock(Arc<AtomicI64>);

impl wasmtime_wasi::HostWallClock for CallClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    fn now(&self) -> std::time::Duration {
        match self.0.load(Ordering::Relaxed) {
            REAL_TIME => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
            nanos => std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)),
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Invariant: the WASI linker is used only for modules whose stores
        // are created with `wasi: Some(..)` (see `Module::new_store`).
        let wasi = self.wasi.as_mut().expect("WASI import from a store created without WASI");
        WasiCtxView { ctx: &mut wasi.ctx, table: &mut wasi.table }
    }
}

/// Caps linear memory per instance and remembers that the cap was hit, so a
/// failed allocation is reported as "memory limit" rather than as whatever
/// trap the guest's allocator turned it into.
pub(crate) struct Limiter {
    pub memory: u64,
    pub exceeded: Option<u64>,
    /// Linear memory of every memory of the instance, in bytes.
    pub used: u64,
}

impl Limiter {
    pub fn new(memory: u64) -> Limiter {
        Limiter { memory, exceeded: None, used: 0 }
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory {
            self.exceeded = Some(desired as u64);
            return Ok(false);
        }
        self.used += desired.saturating_sub(current) as u64;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// A linker with the host import, and WASI p2 when `with_wasi`.
pub(crate) fn linker(engine: &wasmtime::Engine, with_wasi: bool) -> wasmtime::Result<Linker<State>> {
    let mut linker = Linker::new(engine);
    v0_1::add_to_linker(&mut linker)?;
    v0_2::add_to_linker(&mut linker)?;
    if with_wasi {
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    }
    Ok(linker)
}

impl State {
    /// Count host calls and the bytes they returned against the call's
    /// read budget.
    fn charge(&mut self, calls: u32, bytes: usize) -> Result<(), ReadError> {
        let Some(scope) = self.scope.as_mut() else { return Ok(()) };
        let (made, read) = &mut scope.reads;
        *made = made.saturating_add(calls);
        *read = read.saturating_add(bytes);
        let calls = *made;
        if calls > MAX_HOST_CALLS {
            return Err(ReadError::Budget(
                "more than 1000 host calls (host.get, host.list, egress.fetch) in one call (the host's limit); \
                 list once and filter instead of reading object by object",
            ));
        }
        if *read > MAX_READ_BYTES {
            return Err(ReadError::Budget(READ_BUDGET_SPENT));
        }
        Ok(())
    }

    /// The call scope, if `kind` may be read in it.
    fn readable(&self, kind: &Gvk) -> Result<&CallScope, ReadError> {
        let scope = self.scope.as_ref().ok_or(ReadError::Loading)?;
        match &scope.manifest {
            Some(m) if !m.may_read(kind) => {
                Err(ReadError::NotDeclared { kind: kind.clone(), readable: readable_kinds(m) })
            }
            _ => Ok(scope),
        }
    }
}

fn readable_kinds(m: &host_types::Manifest) -> String {
    let mut kinds: Vec<String> = std::iter::once(&m.for_kind)
        .chain(&m.owns)
        .chain(&m.reads)
        .chain(m.watches.iter().map(|w| &w.kind))
        .map(|k| k.to_string())
        .collect();
    kinds.dedup();
    kinds.join(", ")
}
