//! Errors of loading a module and of calling it.

use std::time::Duration;

/// Why a module could not be loaded. Nothing is left behind on error.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The engine could not be configured (address space for the pooling
    /// allocator, an unsupported platform).
    #[error("wasm engine setup failed: {0:#}")]
    Engine(#[source] wasmtime::Error),
    /// The bytes are not a WebAssembly component.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The limits ask for more than the engine allows.
    #[error("invalid limits: {0}")]
    Limits(String),
    /// Cranelift rejected or failed to compile the component.
    #[error("compiling the component failed: {0:#}")]
    Compile(#[source] wasmtime::Error),
    /// The module was built for another major version of the WIT package.
    #[error(
        "module was built for {package}@{found}, this host speaks {package}@{expected}; \
         rebuild the module against one of the host's contracts (wit/reconciler.wit, wit/0.1/), or run a host that speaks {found}"
    )]
    WitVersion {
        /// The package name.
        package: &'static str,
        /// The version the module was built for.
        found: String,
        /// The versions the host speaks.
        expected: String,
    },
    /// The component does not export the reconciler world.
    #[error(
        "module does not implement the operon:reconciler world: {0}; \
         a reconciler exports `operon:reconciler/guest` (manifest, reconcile)"
    )]
    WrongWorld(String),
    /// The component imports something the host does not provide.
    #[error("module imports {0}, which the host does not provide (only operon:reconciler/host and WASI p2)")]
    UnknownImport(String),
    /// Type-checking against the world failed.
    #[error("module does not match the operon:reconciler world: {0:#}")]
    Link(#[source] wasmtime::Error),
    /// The smoke call of `manifest` failed.
    #[error("calling manifest() failed: {0}")]
    Manifest(#[source] Box<CallError>),
    /// `manifest` returned something the host cannot use.
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// The thread loading the module panicked (a bug in the host or the
    /// engine, not in the module).
    #[error("loading the module panicked: {0}")]
    Panicked(String),
    /// A module unloaded while idle could not be loaded again.
    #[error("loading the idle module again failed: {0}")]
    Reload(String),
}

/// Why one call into a guest did not produce a usable answer. Every variant
/// is a reconcile error for the object, never a host failure.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call ran past its wall-clock deadline.
    #[error("timed out after {limit:?} (limit: {limit:?}; raise spec.limits.timeout or find the loop)")]
    Timeout {
        /// The deadline in force.
        limit: Duration,
    },
    /// The guest tried to grow its memory past the cap.
    #[error(
        "exceeded its memory limit of {limit} bytes (tried to grow to {requested} bytes; raise spec.limits.memory or find the leak)"
    )]
    MemoryExceeded {
        /// The cap in force.
        limit: u64,
        /// The size the guest asked for.
        requested: u64,
    },
    /// The guest trapped: `unreachable`, a panic, a bad memory access, a
    /// stack overflow. What the guest said last before it (its panic
    /// message, exception or assertion, from stderr or an error-level log
    /// line) comes first in the message: it is what its author needs.
    #[error("trapped: {}", match said { Some(said) => format!("{said} — {trap}"), None => trap.clone() })]
    Trap {
        /// The trap and the guest's stack.
        trap: String,
        /// The line that explains it, bounded and sanitised (see
        /// `stdio::last_words`), if the guest wrote one.
        said: Option<String>,
    },
    /// The outcome was not well-formed (invalid JSON, not an object, missing
    /// `apiVersion`/`kind`/`metadata.name`).
    #[error("returned a malformed outcome: {0}")]
    Malformed(String),
    /// The outcome carried more bytes than allowed.
    #[error(
        "returned an oversized outcome of {size} bytes (limit: {limit}; raise spec.limits.maxOutput, up to the host's \
         --max-guest-output, or return less)"
    )]
    OutputTooLarge {
        /// Bytes returned.
        size: usize,
        /// The cap in force.
        limit: usize,
    },
    /// No instance could be created (every pooling slot in use, or the
    /// instance's start-up failed).
    #[error("could not instantiate the module: {0:#}")]
    Instantiate(#[source] wasmtime::Error),
    /// The module was unloaded for being idle and could not be loaded again
    /// from the artifact cache (the cache was cleared or is unwritable).
    #[error(
        "was unloaded while idle and could not be loaded again: {0} (publish the module again, or run the host with \
         --unload-idle-after=0)"
    )]
    Reload(String),
}
