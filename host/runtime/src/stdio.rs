//! WASI stdout and stderr of guests, streamed line by line to the host's
//! log (target `operon::guest`, with the controller's name), rate-limited per
//! module.
//!
//! A guest's output never makes it fail: the streams accept every write at
//! once, however much is written, and never close. What a module writes
//! beyond its rate (a token bucket of [`Limits::log_lines_per_second`] with a
//! burst of [`Limits::log_burst`]) is dropped and counted: the log says once
//! that lines are being dropped, and how many once the guest has slowed down
//! (the bucket is half full again), or every 10 s while it has not.
//!
//! A line longer than [`MAX_LINE`] bytes is logged in pieces of that size; a
//! line the guest left unfinished is logged when the call returns.
//!
//! `host.log` goes through the same log ([`GuestLog::message`]): the same
//! rate and drop count, at most [`MAX_LOG_CALLS`] lines per call, each
//! message cut at [`MAX_LINE`] bytes, and its text and fields made plain —
//! a newline, a carriage return or a terminal escape is written as its
//! escape (`\n`, `\u{1b}`), so a guest cannot start a log line of its own,
//! forge another component's, or repaint the reader's terminal.
//!
//! Besides the log, each instance keeps the last lines of its stderr (and of
//! its error-level `host.log` lines: a Rust guest's panic hook reports there)
//! during one call, bounded and sanitised ([`Said`]). When the call traps,
//! [`Said::last_words`] picks the line that explains it (a panic message,
//! an exception, an assertion), and the trap carries it to the parent's
//! event, the Reconciler's rollback and `operon test`.
//!
//! [`Limits::log_lines_per_second`]: super::Limits::log_lines_per_second
//! [`Limits::log_burst`]: super::Limits::log_burst

use bytes::Bytes;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line logged in one piece, in bytes.
pub const MAX_LINE: usize = 4096;

/// The target of the host's own notices about a guest's log (what was
/// dropped): not the guest's `operon::guest`, so a reader (or a filter)
/// tells what the guest said from what the host says about it.
const NOTICES: &str = "operon::runtime::stdio";

/// Most `host.log` lines one call may log; more are dropped and counted.
pub const MAX_LOG_CALLS: u32 = 1000;

/// Most fields of one `host.log` line kept; each key at most
/// [`MAX_FIELD_KEY`] bytes, each value at most [`MAX_FIELD_VALUE`].
const MAX_FIELDS: usize = 32;
const MAX_FIELD_KEY: usize = 64;
const MAX_FIELD_VALUE: usize = 1024;

/// What one write may carry (the permit `check-write` grants); a guest
/// writing more simply writes again.
const WRITE_PERMIT: usize = 64 << 10;

/// Lines of one call's stderr kept for [`Said::last_words`].
const SAID_LINES: usize = 32;

/// Longest line kept for [`Said::last_words`], in characters.
pub const MAX_SAID: usize = 300;

/// What one instance's guest said during the current call: the last
/// [`SAID_LINES`] lines of its stderr and of its error-level log lines,
/// each sanitised (no control characters or terminal escapes) and cut at
/// [`MAX_SAID`] characters. Cleared when a call begins.
#[derive(Clone, Default)]
pub(crate) struct Said(Arc<Mutex<VecDeque<String>>>);

impl Said {
    /// Keep one line (sanitised; empty ones are not kept).
    pub fn push(&self, line: &str) {
        let line = sanitise(line);
        if line.is_empty() {
            return;
        }
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == SAID_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// Forget what earlier calls said.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The line that best explains a trap, if the guest said anything.
    pub fn last_words(&self) -> Option<String> {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        last_words(&lines.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

/// The line of a guest's last output that explains why it stopped:
///
/// - Go's runtime writes `panic: MESSAGE` (or `fatal error: MESSAGE`) first,
///   then the goroutines' stacks: the first such line;
/// - Python writes a traceback that ends with the exception (and
///   componentize-py its own panic after it): the first unindented line
///   after the last `Traceback` line;
/// - otherwise the last line that is not part of a stack trace (indented
///   frames, `at ...`, SpiderMonkey's `name@file:line:column`) nor the
///   runtime's own wrapping of it (componentize-js's variant error and
///   abort): a JavaScript error as the TypeScript SDK logs it, a C
///   assertion or message before `abort()`, the line a Rust guest's panic
///   hook logged.
pub(crate) fn last_words(lines: &[&str]) -> Option<String> {
    if let Some(go) = lines.iter().find(|l| l.starts_with("panic: ") || l.starts_with("fatal error: ")) {
        return Some(go.to_string());
    }
    let traceback = lines.iter().rposition(|l| l.starts_with("Traceback (most recent call last)"));
    if let Some(exception) = traceback.and_then(|at| lines[at + 1..].iter().find(|l| !l.starts_with([' ', '\t']))) {
        return Some(exception.to_string());
    }
    // SpiderMonkey's frames (componentize-js): `name@file:line:column`.
    let js_frame = |l: &str| {
        l.split_once('@').is_some_and(|(_, at)| {
            let mut parts = at.rsplitn(3, ':');
            let numeric = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            numeric(parts.next()) && numeric(parts.next())
        })
    };
    let frame = |l: &str| {
        l.starts_with([' ', '\t'])
            || l.starts_with("at ")
            || l.starts_with("goroutine ")
            || l.starts_with("Stack:")
            || l.starts_with("note: run with `RUST_BACKTRACE")
            || l.starts_with('[') && l.ends_with(']')
            || js_frame(l)
            // componentize-js's own report of an exception it cannot map to the WIT result.
            || l.starts_with("invalid variant tag value")
            || l == "Redirecting call to abort() to mozalloc_abort"
    };
    lines.iter().rev().find(|l| !frame(l)).map(|l| l.to_string())
}

/// `line` without terminal escapes (`ESC [ ... letter`) and other control
/// characters (a tab becomes a space), trimmed, at most [`MAX_SAID`]
/// characters (`…` marks a cut).
fn sanitise(line: &str) -> String {
    let mut out = String::with_capacity(line.len().min(MAX_SAID + 4));
    let mut chars = line.chars().peekable();
    let mut kept = 0;
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters... final letter; any other escape: ESC + one char.
            if chars.next_if_eq(&'[').is_some() {
                while chars.next().is_some_and(|p| !p.is_ascii_alphabetic()) {}
            } else {
                chars.next();
            }
            continue;
        }
        let c = if c == '\t' { ' ' } else { c };
        if c.is_control() {
            continue;
        }
        if kept == MAX_SAID {
            out.push('…');
            break;
        }
        out.push(c);
        kept += 1;
    }
    // Leading indentation is kept: it tells stack frames from messages.
    out.trim_end().to_string()
}

/// The log of one module's guests: the rate limit and the drop count, shared
/// by every instance of the module.
pub(crate) struct GuestLog {
    /// The controller's name, known once `manifest()` has answered.
    controller: OnceLock<String>,
    rate: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    /// While an episode of dropping lasts: the lines dropped since the log
    /// last said so, and when it did.
    dropping: Option<(u64, Instant)>,
}

/// How often the log reports the count while dropping goes on.
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl GuestLog {
    /// A log allowing `rate` lines per second with bursts of `burst`.
    pub fn new(rate: u32, burst: u32) -> GuestLog {
        let burst = f64::from(burst.max(1));
        GuestLog {
            controller: OnceLock::new(),
            rate: f64::from(rate),
            burst,
            bucket: Mutex::new(Bucket { tokens: burst, refilled: Instant::now(), dropping: None }),
            dropped: AtomicU64::new(0),
        }
    }

    /// Name the controller in every later line.
    pub fn set_controller(&self, name: &str) {
        let _ = self.controller.set(name.to_string());
    }

    /// Lines dropped by the rate limit so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn controller(&self) -> &str {
        self.controller.get().map_or("(loading)", String::as_str)
    }

    /// Log one line, or count it as dropped.
    fn line(&self, stream: Stream, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return;
        }
        let Some(report) = self.admit() else { return };
        let controller = self.controller();
        if let Some(count) = report.filter(|&c| c > 0) {
            tracing::warn!(target: NOTICES, controller, dropped = count, "dropped {count} lines of guest output");
        }
        let line = plain(line, MAX_LINE);
        match stream {
            Stream::Stdout => tracing::info!(target: "operon::guest", controller, stream = "stdout", "{line}"),
            Stream::Stderr => tracing::warn!(target: "operon::guest", controller, stream = "stderr", "{line}"),
        }
    }

    /// Log one `host.log` line (the `calls`-th of its call), made plain and
    /// bounded, or count it as dropped.
    pub fn message(&self, level: tracing::Level, message: &str, fields: &[(String, String)], calls: u32) {
        if calls > MAX_LOG_CALLS {
            self.drop_line(|| {
                format!("a guest called host.log more than {MAX_LOG_CALLS} times in one call: dropping the rest")
            });
            return;
        }
        let Some(report) = self.admit() else { return };
        let controller = self.controller();
        if let Some(count) = report.filter(|&c| c > 0) {
            tracing::warn!(target: NOTICES, controller, dropped = count, "dropped {count} lines of guest output");
        }
        let message = plain(message, MAX_LINE);
        let fields = PlainFields(fields);
        match level {
            tracing::Level::TRACE => tracing::trace!(target: "operon::guest", controller, %fields, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(target: "operon::guest", controller, %fields, "{message}"),
            tracing::Level::INFO => tracing::info!(target: "operon::guest", controller, %fields, "{message}"),
            tracing::Level::WARN => tracing::warn!(target: "operon::guest", controller, %fields, "{message}"),
            tracing::Level::ERROR => tracing::error!(target: "operon::guest", controller, %fields, "{message}"),
        }
    }

    /// Count one line dropped for another reason than the rate (`why`
    /// says it, in the first warning of an episode).
    fn drop_line(&self, why: impl FnOnce() -> String) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        self.dropped.fetch_add(1, Ordering::Relaxed);
        match &mut bucket.dropping {
            Some((count, _)) => *count += 1,
            None => {
                bucket.dropping = Some((1, Instant::now()));
                tracing::warn!(target: NOTICES, controller = self.controller(), "{}", why());
            }
        }
    }

    /// Take a token for one line: `None` when the line is dropped (and
    /// counted), else the count of lines dropped to report now, if any.
    fn admit(&self) -> Option<Option<u64>> {
        let report = {
            let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let refill = now.duration_since(bucket.refilled).as_secs_f64() * self.rate;
            bucket.tokens = (bucket.tokens + refill).min(self.burst);
            bucket.refilled = now;
            if bucket.tokens < 1.0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                match &mut bucket.dropping {
                    Some((count, _)) => *count += 1,
                    None => {
                        bucket.dropping = Some((1, now));
                        tracing::warn!(
                            target: NOTICES,
                            controller = self.controller(),
                            "guest output exceeds {} lines/s (burst {}): dropping lines until it slows down",
                            self.rate,
                            self.burst
                        );
                    }
                }
                return None;
            }
            bucket.tokens -= 1.0;
            let slowed = bucket.tokens >= self.burst / 2.0;
            match &mut bucket.dropping {
                Some((count, _)) if slowed => {
                    let count = *count;
                    bucket.dropping = None;
                    Some(count)
                }
                Some((count, last)) if now.duration_since(*last) >= REPORT_EVERY => {
                    let count = std::mem::take(count);
                    *last = now;
                    Some(count)
                }
                _ => None,
            }
        };
        Some(report)
    }
}

/// `text` as one plain line of at most `max` bytes: control characters
/// (a newline, a carriage return, a terminal escape…) written as their
/// escapes, so the log shows what the guest sent and nothing it did not
/// mean the reader to see as a line of its own; `…` marks a cut.
pub(crate) fn plain(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max + 4));
    for c in text.chars() {
        let before = out.len();
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    out
}

/// A `host.log` line's fields as `k="v" k="v"`: at most [`MAX_FIELDS`],
/// keys and values made plain and cut.
struct PlainFields<'a>(&'a [(String, String)]);

impl std::fmt::Display for PlainFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (k, v)) in self.0.iter().take(MAX_FIELDS).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let key: String =
                plain(k, MAX_FIELD_KEY).chars().map(|c| if c == ' ' || c == '=' { '_' } else { c }).collect();
            write!(f, "{key}={:?}", plain(v, MAX_FIELD_VALUE))?;
        }
        if self.0.len() > MAX_FIELDS {
            write!(f, " (and {} more fields)", self.0.len() - MAX_FIELDS)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// One instance's stdout or stderr. Every stream the guest opens on it shares
/// the unfinished line, so a line written in pieces is logged whole.
#[derive(Clone)]
pub(crate) struct GuestStream {
    log: Arc<GuestLog>,
    stream: Stream,
    partial: Arc<Mutex<Vec<u8>>>,
    /// Where stderr's lines are kept for a trap's explanation.
    said: Option<Said>,
}

impl GuestStream {
    pub fn new(log: Arc<GuestLog>, stream: Stream) -> GuestStream {
        GuestStream { log, stream, partial: Arc::new(Mutex::new(Vec::new())), said: None }
    }

    /// Keep this stream's lines in `said` too (before the log's rate limit).
    pub fn keeping(mut self, said: Said) -> GuestStream {
        self.said = Some(said);
        self
    }

    fn line(&self, line: &[u8]) {
        if let Some(said) = &self.said {
            said.push(&String::from_utf8_lossy(line));
        }
        self.log.line(self.stream, line);
    }

    fn write_bytes(&self, mut bytes: &[u8]) {
        let mut partial = self.partial.lock().unwrap_or_else(|p| p.into_inner());
        while !bytes.is_empty() {
            let room = MAX_LINE - partial.len();
            match bytes.iter().take(room).position(|&b| b == b'\n') {
                Some(end) => {
                    partial.extend_from_slice(&bytes[..end]);
                    self.line(&partial);
                    partial.clear();
                    bytes = &bytes[end + 1..];
                }
                None if bytes.len() < room => {
                    partial.extend_from_slice(bytes);
                    bytes = &[];
                }
                None => {
                    partial.extend_from_slice(&bytes[..room]);
                    self.line(&partial);
                    partial.clear();
                    bytes = &bytes[room..];
                }
            }
        }
    }

    /// Log the unfinished line, if any (at the end of a call).
    pub fn finish_line(&self) {
        let mut partial = self.partial.lock().unwrap_or_else(|p| p.into_inner());
        if !partial.is_empty() {
            self.line(&partial);
            partial.clear();
        }
    }
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    /// Always ready: a write never waits.
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestStream {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_the_burst_should_be_dropped_and_counted() {
        let log = Arc::new(GuestLog::new(0, 10));
        let out = GuestStream::new(log.clone(), Stream::Stdout);
        out.write_bytes(&b"line\n".repeat(25));
        assert_eq!(log.dropped(), 15);
    }

    #[test]
    fn a_line_written_in_pieces_should_count_once_and_long_lines_in_pieces() {
        let log = Arc::new(GuestLog::new(0, 3));
        let out = GuestStream::new(log.clone(), Stream::Stderr);
        out.write_bytes(b"hel");
        out.clone().write_bytes(b"lo\n");
        assert_eq!(log.dropped(), 0);
        // 2.5 × MAX_LINE without a newline: two full pieces, the rest pending.
        out.write_bytes(&vec![b'x'; MAX_LINE * 5 / 2]);
        assert_eq!(log.dropped(), 0, "three lines fit the burst");
        out.finish_line();
        assert_eq!(log.dropped(), 1, "the unfinished rest is the fourth line");
    }

    #[test]
    fn stderr_lines_should_be_kept_even_beyond_the_rate_and_cleared_per_call() {
        let log = Arc::new(GuestLog::new(0, 1));
        let said = Said::default();
        let err = GuestStream::new(log.clone(), Stream::Stderr).keeping(said.clone());
        err.write_bytes(b"first\nsecond\nBUG: the \x1b[31mlast\x1b[0m\tline");
        assert_eq!(log.dropped(), 1, "the log's rate still applies");
        err.finish_line();
        assert_eq!(said.last_words().as_deref(), Some("BUG: the last line"));
        said.clear();
        assert_eq!(said.last_words(), None);
    }

    #[test]
    fn last_words_should_pick_the_line_that_explains_a_trap() {
        let words = |text: &str| {
            let said = Said::default();
            text.lines().for_each(|l| said.push(l));
            said.last_words()
        };
        // Go: the panic comes first, the goroutines' stacks after it.
        let go = "panic: BUG: empty message\n\ngoroutine 1 [running]:\nmain.Greeter.Reconcile(...)\n\t/src/main.go:51 +0x3\nexit status 2";
        assert_eq!(words(go).as_deref(), Some("panic: BUG: empty message"));
        // Python: the exception closes the traceback, before componentize-py's own panic.
        let componentized = "Traceback (most recent call last):\n  File \"/app.py\", line 9, in reconcile\nValueError: BUG: empty message\nthread '<unnamed>' panicked at src/lib.rs:1:1:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(words(componentized).as_deref(), Some("ValueError: BUG: empty message"));
        let py = "Traceback (most recent call last):\n  File \"/app.py\", line 9, in reconcile\n    raise ValueError(\"BUG\")\nValueError: BUG: empty message";
        assert_eq!(words(py).as_deref(), Some("ValueError: BUG: empty message"));
        // JavaScript under componentize-js: the SDK's line, its frames, then the runtime's own report.
        let componentize_js = "reconcile threw Error: BUG: empty message\nreconcile@component.js:465:26\n\
            export_guest_0_1_0$reconcile@/tmp/x/initializer.js:602:29\n\
            invalid variant tag value `undefined` (received `Error: BUG: empty message`) specified for `Failure`\n\
            Stack:\n  export_guest_0_1_0$reconcile@/tmp/x/initializer.js:718:17\n\
            Redirecting call to abort() to mozalloc_abort";
        assert_eq!(words(componentize_js).as_deref(), Some("reconcile threw Error: BUG: empty message"));
        // JavaScript: the error, then its frames.
        let js = "Error: BUG: empty message\n    at reconcile (index.js:3:9)\n    at call (sdk.js:1:1)";
        assert_eq!(words(js).as_deref(), Some("Error: BUG: empty message"));
        // Rust std (a WASI guest): the message is on the line after the location.
        let rust = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nBUG: empty message\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(words(rust).as_deref(), Some("BUG: empty message"));
        // C: an assertion or a message before abort().
        assert_eq!(
            words("main.c:12: reconcile: Assertion `message' failed.").as_deref(),
            Some("main.c:12: reconcile: Assertion `message' failed.")
        );
        assert_eq!(words(""), None);
        let long = words(&"x".repeat(MAX_SAID * 2)).unwrap();
        assert_eq!(long.chars().count(), MAX_SAID + 1, "cut, with a mark");
        assert!(long.ends_with('…'));
    }

    #[test]
    fn host_log_text_should_be_one_plain_bounded_line() {
        assert_eq!(plain("ok\nFORGED INFO x\r\u{1b}[2K", 100), "ok\\nFORGED INFO x\\r\\u{1b}[2K");
        let cut = plain(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 + '…'.len_utf8() && cut.ends_with('…'), "{cut}");
        let fields = vec![("a\nb c".to_string(), "v\n".to_string())];
        assert_eq!(PlainFields(&fields).to_string(), "a\\nb_c=\"v\\\\n\"");
        let many: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(PlainFields(&many).to_string().ends_with("(and 8 more fields)"));
    }

    #[test]
    fn host_log_lines_beyond_the_calls_budget_should_be_dropped_and_counted() {
        let log = GuestLog::new(1_000_000, 1_000_000);
        for call in 1..=MAX_LOG_CALLS + 5 {
            log.message(tracing::Level::INFO, "m", &[], call);
        }
        assert_eq!(log.dropped(), 5);
    }

    #[test]
    fn the_rate_should_refill_the_bucket() {
        let log = GuestLog::new(1_000_000, 1);
        log.line(Stream::Stdout, b"a");
        std::thread::sleep(std::time::Duration::from_millis(2));
        log.line(Stream::Stdout, b"b");
        assert_eq!(log.dropped(), 0);
    }
}
