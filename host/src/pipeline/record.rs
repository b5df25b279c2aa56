//! Recording live reconciles as fixtures (`operon run --record DIR`):
//! each recorded reconcile becomes `DIR/CONTROLLER/NAMESPACE.NAME-N.yaml`
//! (the request, the objects the guest read, its outbound calls with their
//! answers) beside `…expected.yaml` (its outcome), in the format `operon
//! test` and every SDK's runner replay with no cluster and no network. So
//! today's traffic is the next version's test: run it against the
//! recording before a swap.
//!
//! Credentials never reach a recording: the calls are recorded as the
//! guest made them (a credential by its name) and the answers as the guest
//! saw them (with any echoed value blanked out).

use crate::contract::egress::Exchange;
use crate::contract::fixture::{self, ErrorKind, Kind, Observed, RequestFile};
use crate::contract::{Failed, Failure, Gvk, Outcome, Request};
use crate::runtime::{CallError, ObjectReader, ReadError};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The first line of a recorded request file.
pub const HEADER: &str = "# recorded by operon run --record:";

/// Where and how often reconciles are recorded.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    /// Only parents whose labels match (`--record-selector`).
    parents: Option<crate::contract::Selector>,
    /// One reconcile in this many is recorded (1: every one).
    every: u64,
    seen: AtomicU64,
    written: AtomicU64,
}

impl Recorder {
    /// Record one reconcile in `every` (at least 1) under `dir`.
    pub fn new(dir: PathBuf, every: u64) -> Recorder {
        Recorder { dir, parents: None, every: every.max(1), seen: AtomicU64::new(0), written: AtomicU64::new(0) }
    }

    /// Only of the parents whose labels `selector` matches.
    #[must_use]
    pub fn of_parents(mut self, selector: crate::contract::Selector) -> Recorder {
        self.parents = Some(selector);
        self
    }

    /// Whether this reconcile of `parent` is recorded (counts the ones
    /// whose parent is selected).
    pub fn sample(&self, parent: &crate::cache::CachedObject) -> bool {
        if let Some(s) = &self.parents
            && !s.matches_with(|k| parent.label(k))
        {
            return false;
        }
        self.seen.fetch_add(1, Ordering::Relaxed).is_multiple_of(self.every)
    }

    /// Write one reconcile: its request, what it read, its outbound calls,
    /// and what came of it.
    ///
    /// # Errors
    /// When the files cannot be written.
    pub fn write(
        &self,
        controller: &str,
        digest: &str,
        request: &Request,
        read: Vec<String>,
        egress: Vec<Exchange>,
        answer: &Result<Result<Outcome, Failed>, CallError>,
    ) -> std::io::Result<PathBuf> {
        let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
        let object = parse(&request.object);
        let children: Vec<Value> =
            request.children.iter().flat_map(|(_, list)| list.iter().map(|c| parse(c))).collect();
        let related: Vec<Value> = request.related.iter().map(|r| parse(r)).collect();
        // What the guest read that the request does not carry already.
        let mut shown: Vec<&Value> = std::iter::once(&object).chain(&children).chain(&related).collect();
        let mut cluster = Vec::new();
        for text in read {
            let o = parse(&text);
            if !shown.iter().any(|s| same_object(s, &o)) && !cluster.iter().any(|c| same_object(c, &o)) {
                cluster.push(o);
            }
        }
        shown.clear();
        let file = RequestFile {
            object: object.clone(),
            children,
            related,
            finalizing: request.finalizing,
            attempt: request.attempt,
            cluster,
            now: Some(request.now_text()),
            egress,
        };
        let ns = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("_");
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("_");
        let dir = self.dir.join(sanitize(controller));
        std::fs::create_dir_all(&dir)?;
        let n = self.written.fetch_add(1, Ordering::Relaxed);
        let base = format!("{}.{}-{n:06}", sanitize(ns), sanitize(name));
        let path = dir.join(format!("{base}.yaml"));
        // What `operon explain` reads back; a comment, so every runner
        // reads the fixture as any other.
        let header = format!("{HEADER} controller {controller}, module {digest}, at {}\n", request.now_text());
        std::fs::write(&path, header + &fixture::request_to_yaml(&file))?;
        let observed = match answer {
            Ok(Ok(outcome)) => Observed::Outcome(outcome.clone()),
            Ok(Err(Failed { failure, status })) => Observed::Error {
                error: match failure {
                    Failure::Transient(m) => ErrorKind::Transient(m.clone()),
                    Failure::Terminal(m) => ErrorKind::Terminal(m.clone()),
                },
                status: status.clone(),
            },
            Err(e) => Observed::Error { error: ErrorKind::Sandbox(e.to_string()), status: None },
        };
        fixture::write_expected(Kind::Reconcile, &dir.join(format!("{base}.expected.yaml")), &observed.to_value())
            .map_err(std::io::Error::other)?;
        Ok(path)
    }
}

fn same_object(a: &Value, b: &Value) -> bool {
    let key = |o: &Value| {
        (
            o.get("apiVersion").cloned(),
            o.get("kind").cloned(),
            o.pointer("/metadata/namespace").cloned(),
            o.pointer("/metadata/name").cloned(),
        )
    };
    key(a) == key(b)
}

/// A name safe as a file name.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// A reader that remembers what it answered (for a recording).
pub struct Remembering {
    inner: Arc<dyn ObjectReader>,
    /// The objects read, as JSON.
    pub read: Mutex<Vec<String>>,
}

impl Remembering {
    /// Remember what `inner` answers.
    pub fn new(inner: Arc<dyn ObjectReader>) -> Remembering {
        Remembering { inner, read: Mutex::default() }
    }

    /// What was read.
    pub fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl ObjectReader for Remembering {
    fn get(&self, kind: &Gvk, namespace: Option<&str>, name: &str) -> Result<Option<String>, ReadError> {
        let found = self.inner.get(kind, namespace, name)?;
        if let Some(o) = &found {
            self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(o.clone());
        }
        Ok(found)
    }

    fn list(&self, kind: &Gvk, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, ReadError> {
        let found = self.inner.list(kind, namespace, selector)?;
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(found.iter().cloned());
        Ok(found)
    }

    fn list_within(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<String>, ReadError> {
        let found = self.inner.list_within(kind, namespace, selector, max_bytes)?;
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(found.iter().cloned());
        Ok(found)
    }
}
