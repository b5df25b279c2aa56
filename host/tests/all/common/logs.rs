//! One log subscriber for the whole test binary.
//!
//! A process has one global subscriber, and every suite of this binary
//! shares the process: each calls [`init`] (which installs it once), and a
//! test that asserts on the host's log takes a [`Capture`]. Lines go to the
//! test's own output (shown when it fails; `RUST_LOG` filters them, `warn`
//! by default) and, while a capture is open, into memory at `INFO` and
//! above whatever `RUST_LOG` says.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// What the open captures see: the log since the first of them opened.
static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// How many captures are open (nothing is kept while none is).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Install the binary's subscriber, once.
pub fn init() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        let shown = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()));
        let kept = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| Keep)
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        tracing_subscriber::registry()
            .with(shown)
            .with(kept)
            .try_init()
            .expect("no other global subscriber in the test binary: suites call common::logs::init");
    });
}

/// The host's log from when it was taken, for a test to read.
pub struct Capture {
    start: usize,
}

/// Start keeping the log (and install the subscriber if need be).
pub fn capture() -> Capture {
    init();
    let buffer = CAPTURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    OPEN.fetch_add(1, Ordering::AcqRel);
    Capture { start: buffer.len() }
}

impl Capture {
    /// Every line logged since the capture was taken (by any thread: tests
    /// running beside it included).
    pub fn text(&self) -> String {
        let buffer = CAPTURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&buffer[self.start..]).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let mut buffer = CAPTURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if OPEN.fetch_sub(1, Ordering::AcqRel) == 1 {
            buffer.clear();
        }
    }
}

/// The writer of the kept lines: into [`CAPTURED`] while a capture is open.
struct Keep;

impl std::io::Write for Keep {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if OPEN.load(Ordering::Acquire) > 0 {
            CAPTURED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
