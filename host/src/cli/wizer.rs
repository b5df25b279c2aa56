//! `operon wizer`: wizer's pre-initialisation, with a WASI that is the same
//! on every run, so a snapshot depends on its inputs only.
//!
//! componentize-js turns a JavaScript bundle into a component by running
//! the SpiderMonkey engine's initialisation under wizer and keeping the
//! memory it leaves (a snapshot). wizer's own WASI hands the engine the
//! machine's entropy and clocks, which end up in the snapshot (hash seeds,
//! `Math.random`'s state, timestamps), and componentize-js names the
//! build's directories by their host paths (a randomly named temporary
//! one among them), which end up there too: two builds of one bundle never
//! gave the same bytes. `operon build` of a TypeScript project hands this
//! command to componentize-js as its wizer (`--wizer-bin`); it takes
//! wizer's command line and differs only in what the guest sees:
//!
//! - randomness from a fixed seed, and wall and monotonic clocks that start
//!   at fixed values and step by a fixed amount at each read (a frozen
//!   clock would hang a loop that waits for time to pass);
//! - each directory at a fixed guest path (`--dir D` is `/.operon-dir-N`,
//!   `--mapdir G::H` is `G`), and every host path of them in the standard
//!   input (where componentize-js passes the engine its arguments)
//!   rewritten to the guest's;
//! - the environment without what a shell adds (`PWD`, `OLDPWD`, `SHLVL`,
//!   `_`).
//!
//! The snapshot is taken by the `wasmtime-wizer` crate of the wasmtime the
//! host runs.

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::{Engine, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtx};

/// The seed of every random byte the guest reads.
const SEED: u64 = 0x6f70_6572_6f6e;
/// What the wall clock says at its first read: 2000-01-01T00:00:00Z.
const EPOCH: Duration = Duration::from_secs(946_684_800);
/// How far each clock moves at each read.
const TICK: Duration = Duration::from_micros(1);
/// Variables a shell adds to the environment it passes on.
const SHELL_VARIABLES: [&str; 4] = ["PWD", "OLDPWD", "SHLVL", "_"];

/// wizer's command line, as componentize-js writes it.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Let the initialisation call WASI (always: the WASI is deterministic).
    #[arg(long)]
    allow_wasi: bool,
    /// The export that initialises the module.
    #[arg(short = 'f', long, default_value = "wizer.initialize")]
    init_func: String,
    /// A directory the guest may read, at a fixed guest path.
    #[arg(long = "dir", value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// A directory the guest reads at GUEST.
    #[arg(long = "mapdir", value_name = "GUEST::HOST")]
    mapdirs: Vec<String>,
    /// Accepted for wizer's sake: bulk memory is always on.
    #[arg(long, value_name = "true|false")]
    wasm_bulk_memory: Option<bool>,
    /// Pass this process's environment to the guest.
    #[arg(long, value_name = "true|false")]
    inherit_env: Option<bool>,
    /// Keep the initialisation function exported.
    #[arg(long, value_name = "true|false")]
    keep_init_func: Option<bool>,
    /// Where to write the initialised module.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// The module to initialise.
    input: PathBuf,
}

/// Initialise `args.input` and write its snapshot to `args.output`.
pub fn run(args: Args) -> Result<()> {
    if !args.allow_wasi {
        bail!("operon wizer runs WASI modules only: pass --allow-wasi");
    }
    let input = std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let mut stdin = Vec::new();
    std::io::stdin().read_to_end(&mut stdin).context("reading standard input")?;

    let mut wasi = WasiCtx::builder();
    let mut renames = Vec::new();
    for (i, dir) in args.dirs.iter().enumerate() {
        let guest = format!("/.operon-dir-{i}");
        wasm(wasi.preopened_dir(dir, &guest, FsPerms::ReadOnly).map(drop))
            .with_context(|| format!("opening {}", dir.display()))?;
        renames.push((dir.display().to_string(), guest));
    }
    for map in &args.mapdirs {
        let Some((guest, host)) = map.split_once("::") else {
            bail!("--mapdir {map:?} is not GUEST::HOST");
        };
        wasm(wasi.preopened_dir(host, guest, FsPerms::ReadOnly).map(drop))
            .with_context(|| format!("opening {host}"))?;
        renames.push((host.to_string(), guest.to_string()));
    }
    let stdin = guest_paths(&String::from_utf8_lossy(&stdin), &renames);
    if args.inherit_env == Some(true) {
        let env: Vec<(String, String)> =
            std::env::vars().filter(|(k, _)| !SHELL_VARIABLES.contains(&k.as_str())).collect();
        wasi.envs(&env);
    }
    wasi.stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(stdin.into_bytes()))
        .inherit_stdout()
        .inherit_stderr()
        .secure_random(rand::rngs::StdRng::seed_from_u64(SEED))
        .insecure_random(rand::rngs::StdRng::seed_from_u64(SEED + 1))
        .insecure_random_seed(u128::from(SEED))
        .wall_clock(SteppingClock::default())
        .monotonic_clock(SteppingClock::default());
    let wasi = wasi.build_p1();

    let mut wizer = wasmtime_wizer::Wizer::new();
    wizer.init_func(&args.init_func);
    if let Some(keep) = args.keep_init_func {
        wizer.keep_init_func(keep);
    }
    let snapshot =
        tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(snapshot(&wizer, wasi, &input))?;
    std::fs::write(&args.output, snapshot).with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

/// Instantiate the module with `wasi`, run its initialisation and return
/// the module its memory and globals then make.
async fn snapshot(wizer: &wasmtime_wizer::Wizer, wasi: WasiP1Ctx, module: &[u8]) -> Result<Vec<u8>> {
    let mut config = wasmtime::Config::new();
    config.wasm_bulk_memory(true);
    let engine = wasm(Engine::new(&config))?;
    let mut store = Store::new(&engine, wasi);
    let mut linker = Linker::new(&engine);
    wasm(wasmtime_wasi::p1::add_to_linker_async(&mut linker, |cx| cx))?;
    let (cx, instrumented) = wasm(wizer.instrument(module))?;
    let compiled = wasm(Module::new(&engine, &instrumented)).context("compiling the module")?;
    // As wizer: the initialisation may call WASI only; any other import traps.
    wasm(linker.define_unknown_imports_as_traps(&compiled))?;
    let instance = wasm(linker.instantiate_async(&mut store, &compiled).await)?;
    if wizer.get_init_func() != "_initialize"
        && let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize")
    {
        wasm(init.call_async(&mut store, ()).await).context("the module's _initialize trapped")?;
    }
    let init = wasm(instance.get_typed_func::<(), ()>(&mut store, wizer.get_init_func()))
        .with_context(|| format!("the module exports no `{}: func()`", wizer.get_init_func()))?;
    wasm(init.call_async(&mut store, ()).await).with_context(|| format!("`{}` trapped", wizer.get_init_func()))?;
    wasm(wizer.snapshot(&cx, &mut Initialised { store: &mut store, instance }).await)
}

/// wasmtime's error as the command's.
fn wasm<T>(result: wasmtime::Result<T>) -> Result<T> {
    result.map_err(anyhow::Error::from)
}

/// The instance whose memories and globals the snapshot reads.
struct Initialised<'a> {
    store: &'a mut Store<WasiP1Ctx>,
    instance: wasmtime::Instance,
}

impl wasmtime_wizer::InstanceState for Initialised<'_> {
    async fn global_get(&mut self, name: &str, _: wasmtime_wizer::ValType) -> wasmtime_wizer::SnapshotVal {
        use wasmtime_wizer::SnapshotVal;
        // Wizer asks only for the globals its instrumentation exported.
        let global = self.instance.get_global(&mut *self.store, name).expect("an exported global");
        match global.get(&mut *self.store) {
            wasmtime::Val::I32(x) => SnapshotVal::I32(x),
            wasmtime::Val::I64(x) => SnapshotVal::I64(x),
            wasmtime::Val::F32(x) => SnapshotVal::F32(x),
            wasmtime::Val::F64(x) => SnapshotVal::F64(x),
            wasmtime::Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("wizer cannot snapshot the global {name} ({other:?})"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self.instance.get_memory(&mut *self.store, name).expect("an exported memory");
        contents(memory.data(&*self.store));
    }
}

/// `text` with each host directory of `renames` (host, guest) replaced by
/// its guest path, the longest first (a directory inside another is its own).
fn guest_paths(text: &str, renames: &[(String, String)]) -> String {
    let mut renames: Vec<&(String, String)> = renames.iter().collect();
    renames.sort_by_key(|(host, _)| std::cmp::Reverse(host.len()));
    let mut text = text.to_string();
    for (host, guest) in renames {
        let host = host.trim_end_matches('/');
        if host.is_empty() {
            continue;
        }
        let guest_dir = if guest.ends_with('/') { guest.clone() } else { format!("{guest}/") };
        text = text.replace(&format!("{host}/"), &guest_dir).replace(host, guest);
    }
    text
}

/// A clock that starts at a fixed time and moves by [`TICK`] at each read.
#[derive(Default)]
struct SteppingClock(AtomicU64);

impl SteppingClock {
    fn next(&self) -> Duration {
        TICK * u32::try_from(self.0.fetch_add(1, Ordering::Relaxed)).unwrap_or(u32::MAX)
    }
}

impl wasmtime_wasi::HostWallClock for SteppingClock {
    fn resolution(&self) -> Duration {
        TICK
    }

    fn now(&self) -> Duration {
        EPOCH + self.next()
    }
}

impl wasmtime_wasi::HostMonotonicClock for SteppingClock {
    fn resolution(&self) -> u64 {
        u64::try_from(TICK.as_nanos()).unwrap_or(1)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.next().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_should_become_guest_paths_the_deepest_directory_first() {
        let renames = vec![
            ("/tmp/3f2a/sources".to_string(), "/.operon-dir-0".to_string()),
            ("/home/me/greeter/.operon/build".to_string(), "/".to_string()),
        ];
        let args = "--initializer-script-path /tmp/3f2a/sources/initializer.js \
                    --strip-path-prefix /home/me/greeter/.operon/build/ component.js";
        assert_eq!(
            guest_paths(args, &renames),
            "--initializer-script-path /.operon-dir-0/initializer.js --strip-path-prefix / component.js"
        );
    }

    #[test]
    fn the_clocks_should_start_at_fixed_times_and_step() {
        use wasmtime_wasi::{HostMonotonicClock, HostWallClock};
        let wall = SteppingClock::default();
        assert_eq!(HostWallClock::now(&wall), EPOCH);
        assert_eq!(HostWallClock::now(&wall), EPOCH + TICK);
        let monotonic = SteppingClock::default();
        assert_eq!(HostMonotonicClock::now(&monotonic), 0);
        assert_eq!(HostMonotonicClock::now(&monotonic), 1_000);
    }
}
