//! Languages benchmark: the WebApp reconciler in every language, side by
//! side, on the same 4 KB WebApp request.
//!
//! Run with `cargo xtask bench languages` (which builds every language's
//! component into `target/guests/` first), or `cargo bench -p operon --bench
//! languages` once they exist. Prints figures; asserts nothing about time,
//! only that every language answers the request exactly as the Rust logic
//! compiled natively does.
//!
//! # What is measured, per language
//!
//! - **size**: the component file.
//! - **cold compile**: `Runtime::load` with no artifact cache, as reported
//!   by the module (`ModuleInfo::compile_time`: Cranelift, all functions,
//!   on the engine's threads).
//! - **cached load**: the same from the on-disk artifact cache
//!   (`from_cache`), median of [`LOADS`] loads: sum (the cache's integrity
//!   check) and map and deserialize the precompiled artifact; the sum is
//!   also timed alone, with BLAKE3 as the cache takes it and SHA-256 as it
//!   took it before. **load total** adds what every
//!   load does besides (type check, pre-linking, the smoke call of
//!   `manifest()` on a new instance): the wall time of `Runtime::load`.
//! - **instantiate**: derived per round as p50(fresh) − p50(pooled), the
//!   cost of a new instance from the `InstancePre` (start functions and
//!   language-runtime initialisation included) and its drop.
//! - **reconcile p50/p99 (warm)**: `Module::reconcile` on a reused
//!   (`pooled`) instance: request into WIT values, the guest's parse, logic
//!   and serialization, the host's check of the outcome.
//! - **memory/instance**: the linear memory of one instance after the calls
//!   (every memory of the component, as the resource limiter saw it grow).
//!
//! Fresh and pooled calls run in [`ROUNDS`] interleaved rounds; figures are
//! medians across rounds.

#[path = "common/webapp.rs"]
mod webapp;

use operon::runtime::{self, InstancePolicy, Limits, Module, NoObjects, Request, Runtime};
use serde_json::Value;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LANGUAGES: [&str; 5] = ["rust-webapp", "c-webapp", "go-webapp", "ts-webapp", "python-webapp"];
/// Rounds reported (after one warm-up round).
const ROUNDS: usize = 9;
/// Loads from the cache whose median is reported.
const LOADS: usize = 5;
/// Time spent on calls per round and variant, at least [`MIN_CALLS`] calls.
const ROUND_BUDGET: Duration = Duration::from_millis(300);
const MIN_CALLS: usize = 20;

/// The targets.
const TARGET_WARM_P99: Duration = Duration::from_millis(1);
const TARGET_CACHED_LOAD: Duration = Duration::from_millis(50);

struct Figures {
    name: &'static str,
    size: usize,
    uses_wasi: bool,
    cold_compile: Duration,
    cached_load: Duration,
    load_total: Duration,
    instantiate: Duration,
    fresh_p50: Duration,
    p50: Duration,
    p99: Duration,
    memory: u64,
    calls: usize,
    /// The precompiled artifact's size, and what summing it costs (the
    /// cache's integrity check at every load): BLAKE3 mapped, as now;
    /// SHA-256 streamed, as before.
    artifact: u64,
    sum_blake3: Duration,
    sum_sha256: Duration,
}

fn main() {
    let native = webapp::native_call(&webapp::webapp_request()).expect("native reconcile");
    let request = webapp::to_host(&webapp::webapp_request());
    let expected_desired: Vec<Value> = native.desired.iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let expected_status: Option<Value> = native.status.as_deref().map(|s| serde_json::from_str(s).unwrap());

    let started = Instant::now();
    let mut all = Vec::new();
    for name in LANGUAGES {
        let path = guests_dir().join(format!("{name}.wasm"));
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; build it with `cargo xtask guests {name}`", path.display()));
        eprintln!("languages: {name} ({:.1} MiB)", bytes.len() as f64 / (1 << 20) as f64);
        let figures = measure(name, &bytes, &request, &expected_desired, &expected_status);
        all.push(figures);
    }

    println!();
    println!("Operon languages benchmark: the WebApp reconciler per language, same 4 KB request");
    println!(
        "{} CPUs, {ROUNDS} rounds (+1 warm-up) of fresh and pooled calls, {:.0} s; every language's outcome == the \
         native Rust outcome: yes",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        started.elapsed().as_secs_f64()
    );
    println!();
    println!(
        "  {:<14} {:>9} {:>5} {:>12} {:>11} {:>10} {:>11} {:>11} {:>11} {:>11} {:>9}",
        "language",
        "size",
        "wasi",
        "cold compile",
        "cached load",
        "load total",
        "instantiate",
        "warm p50",
        "warm p99",
        "fresh p50",
        "mem/inst"
    );
    for f in &all {
        println!(
            "  {:<14} {:>9} {:>5} {:>12} {:>11} {:>10} {:>11} {:>11} {:>11} {:>11} {:>9}",
            f.name,
            size(f.size as u64),
            if f.uses_wasi { "yes" } else { "no" },
            ms(f.cold_compile),
            ms(f.cached_load),
            ms(f.load_total),
            us(f.instantiate),
            us(f.p50),
            us(f.p99),
            us(f.fresh_p50),
            size(f.memory),
        );
    }
    println!();
    println!("where the cached load goes: the artifact's integrity sum, then mapping and deserializing it");
    println!(
        "  {:<14} {:>9} {:>11} {:>14} {:>13} {:>18}",
        "language", "artifact", "cached load", "sum (BLAKE3)", "the rest", "sum (SHA-256, was)"
    );
    for f in &all {
        println!(
            "  {:<14} {:>9} {:>11} {:>14} {:>13} {:>18}",
            f.name,
            size(f.artifact),
            ms(f.cached_load),
            ms(f.sum_blake3),
            ms(f.cached_load.saturating_sub(f.sum_blake3)),
            ms(f.sum_sha256),
        );
    }
    println!();
    println!("targets: warm reconcile p99 < {}, cached load < {}", us(TARGET_WARM_P99), ms(TARGET_CACHED_LOAD));
    for f in &all {
        println!(
            "  {:<14} warm p99 {:>10} {:<7} cached load {:>9} {}   ({} warm calls per round)",
            f.name,
            us(f.p99),
            verdict(f.p99 < TARGET_WARM_P99),
            ms(f.cached_load),
            verdict(f.cached_load < TARGET_CACHED_LOAD),
            f.calls
        );
    }
    println!();
}

fn measure(
    name: &'static str,
    bytes: &[u8],
    request: &Request,
    expected_desired: &[Value],
    expected_status: &Option<Value>,
) -> Figures {
    let pooled_limits = Limits { instance_policy: InstancePolicy::Pooled, pool_size: 1, ..Limits::default() };
    let fresh_limits = Limits { instance_policy: InstancePolicy::Fresh, ..Limits::default() };

    // Cold compile: no cache at all.
    let uncached = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).expect("engine");
    let cold = uncached.load(bytes, pooled_limits.clone()).expect("load");
    let cold_compile = cold.info().compile_time;
    drop(cold);

    // Cached loads: fill a fresh cache once, then load from it.
    let dir = tempfile::tempdir().expect("temp dir");
    let rt =
        Runtime::new(runtime::Config { artifact_dir: Some(dir.path().into()), ..Default::default() }).expect("engine");
    assert!(!rt.load(bytes, pooled_limits.clone()).expect("load").info().from_cache);
    let mut cached = Vec::new();
    let mut totals = Vec::new();
    for _ in 0..LOADS {
        let started = Instant::now();
        let module = rt.load(bytes, pooled_limits.clone()).expect("load from the cache");
        totals.push(started.elapsed());
        assert!(module.info().from_cache, "{name} did not load from the artifact cache");
        cached.push(module.info().compile_time);
    }

    let (artifact, sum_blake3, sum_sha256) = sums(dir.path());

    let pooled = rt.load(bytes, pooled_limits).expect("load");
    let fresh = rt.load(bytes, fresh_limits).expect("load");
    let reader: Arc<dyn runtime::ObjectReader> = Arc::new(NoObjects);
    for module in [&pooled, &fresh] {
        let outcome = module.reconcile(request, reader.clone()).expect("sandbox").expect("reconcile");
        assert_eq!(outcome.desired, expected_desired, "{name} disagrees with the Rust logic on desired objects");
        assert_eq!(&outcome.status, expected_status, "{name} disagrees with the Rust logic on the status");
        assert!(outcome.events.is_empty() && outcome.requeue_after.is_none(), "{name}: {outcome:?}");
    }

    // How many calls fit the round budget, from one timed call of each.
    let calls = |module: &Module| {
        let started = Instant::now();
        timed(module, request, &reader);
        (ROUND_BUDGET.as_nanos() / started.elapsed().as_nanos().max(1)) as usize
    };
    let n = calls(&pooled).clamp(MIN_CALLS, 5000);
    let n_fresh = calls(&fresh).clamp(MIN_CALLS, 5000);
    let (mut p50s, mut p99s, mut fresh_p50s, mut instantiate) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let mut pooled_times: Vec<Duration> = Vec::with_capacity(n);
        let mut fresh_times: Vec<Duration> = Vec::with_capacity(n_fresh);
        // Alternate which variant goes first.
        for first in [round % 2 == 0, round % 2 == 1] {
            if first {
                pooled_times.extend((0..n).map(|_| timed(&pooled, request, &reader)));
            } else {
                fresh_times.extend((0..n_fresh).map(|_| timed(&fresh, request, &reader)));
            }
        }
        if round == 0 {
            continue;
        }
        pooled_times.sort_unstable();
        fresh_times.sort_unstable();
        let (p50, fresh_p50) = (percentile(&pooled_times, 50.0), percentile(&fresh_times, 50.0));
        p50s.push(p50);
        p99s.push(percentile(&pooled_times, 99.0));
        fresh_p50s.push(fresh_p50);
        instantiate.push(fresh_p50.saturating_sub(p50));
    }

    Figures {
        name,
        size: bytes.len(),
        uses_wasi: pooled.info().uses_wasi,
        cold_compile,
        cached_load: median(cached),
        load_total: median(totals),
        instantiate: median(instantiate),
        fresh_p50: median(fresh_p50s),
        p50: median(p50s),
        p99: median(p99s),
        memory: pooled.peak_instance_memory().max(fresh.peak_instance_memory()),
        calls: n,
        artifact,
        sum_blake3,
        sum_sha256,
    }
}

/// The cache's one artifact in `dir`: its size, and the median time of
/// summing it with BLAKE3 (mapped, as the cache does) and with SHA-256
/// (streamed, as it did).
fn sums(dir: &std::path::Path) -> (u64, Duration, Duration) {
    let artifact = std::fs::read_dir(dir)
        .expect("the artifact cache")
        .map(|e| e.expect("an entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a compiled artifact in the cache");
    let len = std::fs::metadata(&artifact).expect("the artifact").len();
    let (mut blake3s, mut sha256s) = (Vec::new(), Vec::new());
    for _ in 0..LOADS {
        let started = Instant::now();
        let mut h = blake3::Hasher::new();
        h.update_mmap(&artifact).expect("summing the artifact");
        black_box(h.finalize());
        blake3s.push(started.elapsed());
        let started = Instant::now();
        let mut h = <sha2::Sha256 as sha2::Digest>::new();
        std::io::copy(&mut std::fs::File::open(&artifact).expect("the artifact"), &mut h).expect("reading it");
        black_box(sha2::Digest::finalize(h));
        sha256s.push(started.elapsed());
    }
    (len, median(blake3s), median(sha256s))
}

fn timed(module: &Module, request: &Request, reader: &Arc<dyn runtime::ObjectReader>) -> Duration {
    let reader = reader.clone();
    let started = Instant::now();
    let outcome = module.reconcile(black_box(request), reader);
    let elapsed = started.elapsed();
    assert!(matches!(outcome, Ok(Ok(_))), "the guest call failed: {outcome:?}");
    elapsed
}

/// `target/guests`, or `$OPERON_GUESTS_DIR`.
fn guests_dir() -> PathBuf {
    std::env::var_os("OPERON_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/guests"))
}

/// Nearest-rank percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn us(d: Duration) -> String {
    if d >= Duration::from_millis(10) { ms(d) } else { format!("{:.1} µs", d.as_secs_f64() * 1e6) }
}

fn ms(d: Duration) -> String {
    if d >= Duration::from_secs(10) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}
