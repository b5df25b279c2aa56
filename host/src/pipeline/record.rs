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
//!
//! **Recordings are meant to become committed fixtures**, so what they hold
//! is bounded and private:
//! - every Secret's `data` and `stringData` values (the parent, children,
//!   related objects, what the guest read, the outcome's children) are
//!   replaced by [`SECRET_STAND_IN`], and any of those values found
//!   elsewhere in the recording (an outbound call's body, a status) is
//!   blanked out too;
//! - files are written `0600` in a directory per controller made `0700`,
//!   never through a symbolic link (a file is created new, a directory
//!   that is a link is refused);
//! - each controller's directory holds at most [`Recorder::max_bytes`]
//!   (`--record-max-size`); the oldest recordings go first.

use crate::contract::egress::Exchange;
use crate::contract::fixture::{self, ErrorKind, Kind, Observed, RequestFile};
use crate::contract::{Failed, Failure, Gvk, Outcome, Request};
use crate::runtime::{CallError, ObjectReader, ReadError};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The first line of a recorded request file.
pub const HEADER: &str = "# recorded by operon run --record:";

/// What a Secret's values become in a recording: `redacted`, base64 in
/// `data` (so a guest decoding it still reads text), plain in
/// `stringData`.
pub const SECRET_STAND_IN: &str = "redacted";

/// A controller's recordings by default, at most (`--record-max-size`).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// Where and how often reconciles are recorded.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    /// Only parents whose labels match (`--record-selector`).
    parents: Option<crate::contract::Selector>,
    /// One reconcile in this many is recorded (1: every one).
    every: u64,
    /// The most bytes one controller's directory holds.
    max_bytes: u64,
    seen: AtomicU64,
    /// The last recording's number: microseconds since the epoch, so
    /// numbers keep rising across restarts and `operon explain` orders by
    /// them.
    last: AtomicU64,
    /// Each controller directory's recordings, oldest first, and their
    /// size together.
    dirs: Mutex<HashMap<String, Kept>>,
}

/// The recordings of one controller's directory.
#[derive(Debug, Default)]
struct Kept {
    files: VecDeque<(u64, Vec<PathBuf>)>,
    bytes: u64,
}

impl Recorder {
    /// Record one reconcile in `every` (at least 1) under `dir`.
    pub fn new(dir: PathBuf, every: u64) -> Recorder {
        Recorder {
            dir,
            parents: None,
            every: every.max(1),
            max_bytes: DEFAULT_MAX_BYTES,
            seen: AtomicU64::new(0),
            last: AtomicU64::new(0),
            dirs: Mutex::default(),
        }
    }

    /// Keep at most `bytes` of recordings per controller (the oldest go).
    #[must_use]
    pub fn max_bytes(mut self, bytes: u64) -> Recorder {
        self.max_bytes = bytes;
        self
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
    /// and what came of it — Secret values replaced, the files private, the
    /// oldest of the controller's recordings removed past its bound.
    ///
    /// # Errors
    /// When the files cannot be written (a link where the controller's
    /// directory or a file should be is refused).
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
        let mut secrets = Vec::new();
        let mut object = parse(&request.object);
        let mut children: Vec<Value> =
            request.children.iter().flat_map(|(_, list)| list.iter().map(|c| parse(c))).collect();
        let mut related: Vec<Value> = request.related.iter().map(|r| parse(r)).collect();
        // What the guest read that the request does not carry already.
        let mut cluster: Vec<Value> = Vec::new();
        for text in read {
            let o = parse(&text);
            let shown = std::iter::once(&object).chain(&children).chain(&related).chain(&cluster);
            if !shown.into_iter().any(|s| same_object(s, &o)) {
                cluster.push(o);
            }
        }
        for v in std::iter::once(&mut object).chain(&mut children).chain(&mut related).chain(&mut cluster) {
            stand_in_secrets(v, &mut secrets);
        }
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
        let mut expected = observed.to_value();
        stand_in_secrets(&mut expected, &mut secrets);
        let mut egress = serde_json::to_value(&egress).unwrap_or(Value::Null);
        // Values short enough to be common words stay: blanking every "1"
        // would say nothing about the Secret and ruin the fixture.
        secrets.retain(|s| s.len() >= 4);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        for v in std::iter::once(&mut object)
            .chain(&mut children)
            .chain(&mut related)
            .chain(&mut cluster)
            .chain([&mut expected, &mut egress])
        {
            blank(v, &secrets);
        }
        let file = RequestFile {
            object: object.clone(),
            children,
            related,
            finalizing: request.finalizing,
            attempt: request.attempt,
            cluster,
            now: Some(request.now_text()),
            egress: serde_json::from_value(egress).unwrap_or_default(),
        };
        let ns = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("_");
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("_");
        let folder = sanitize(controller);
        let dir = self.dir.join(&folder);
        private_dir(&dir)?;
        let n = self.number();
        let base = format!("{}.{}-{n}", sanitize(ns), sanitize(name));
        let path = dir.join(format!("{base}.yaml"));
        // What `operon explain` reads back; a comment, so every runner
        // reads the fixture as any other.
        let header = format!("{HEADER} controller {controller}, module {digest}, at {}\n", request.now_text());
        let request_text = header + &fixture::request_to_yaml(&file);
        let expected_path = dir.join(format!("{base}.expected.yaml"));
        let expected_text = fixture::expected_to_yaml(Kind::Reconcile, &expected);
        let size = (request_text.len() + expected_text.len()) as u64;
        self.make_room(&folder, &dir, size);
        private_file(&path, request_text.as_bytes())?;
        private_file(&expected_path, expected_text.as_bytes())?;
        let mut dirs = self.dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = dirs.entry(folder).or_default();
        kept.files.push_back((size, vec![path.clone(), expected_path]));
        kept.bytes += size;
        Ok(path)
    }

    /// The next recording's number.
    fn number(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self.last.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// Remove the oldest recordings of `folder` until `adding` more bytes
    /// fit its bound (what an earlier run left there counts too).
    fn make_room(&self, folder: &str, dir: &Path, adding: u64) {
        let mut dirs = self.dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = dirs.entry(folder.to_string()).or_insert_with(|| existing(dir));
        while kept.bytes + adding > self.max_bytes {
            let Some((size, files)) = kept.files.pop_front() else { break };
            for f in files {
                let _ = std::fs::remove_file(f);
            }
            kept.bytes = kept.bytes.saturating_sub(size);
        }
    }
}

/// The recordings already in `dir`, oldest first (by their number).
fn existing(dir: &Path) -> Kept {
    let mut cases: Vec<(u64, u64, Vec<PathBuf>)> = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(base) = name.strip_suffix(".yaml").filter(|b| !b.ends_with(".expected")) else { continue };
        let Some(n) = base.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()) else { continue };
        let expected = dir.join(format!("{base}.expected.yaml"));
        let size = [&path, &expected].iter().filter_map(|p| std::fs::symlink_metadata(p).ok()).map(|m| m.len()).sum();
        cases.push((n, size, vec![path, expected]));
    }
    cases.sort_by_key(|c| c.0);
    let bytes = cases.iter().map(|c| c.1).sum();
    Kept { files: cases.into_iter().map(|(_, size, files)| (size, files)).collect(), bytes }
}

/// Make `dir` (mode 0700) unless it exists; refuse a link.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return Err(std::io::Error::other(format!(
                    "{} is not a directory of recordings (a link or a file): refusing to record through it",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Write a new file of mode 0600 at `path`: never over an existing file,
/// never through a link.
fn private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

/// Replace the values of every Secret within `v` by [`SECRET_STAND_IN`],
/// keeping what they were (decoded, and as written) in `found`.
fn stand_in_secrets(v: &mut Value, found: &mut Vec<String>) {
    use base64::Engine as _;
    match v {
        Value::Object(map) => {
            let secret = map.get("kind").and_then(Value::as_str) == Some("Secret")
                && map.get("apiVersion").and_then(Value::as_str) == Some("v1");
            if secret {
                let encoded = base64::engine::general_purpose::STANDARD.encode(SECRET_STAND_IN);
                for (field, stand_in) in [("data", encoded.as_str()), ("stringData", SECRET_STAND_IN)] {
                    for value in
                        map.get_mut(field).and_then(Value::as_object_mut).into_iter().flat_map(|m| m.values_mut())
                    {
                        if let Some(text) = value.as_str() {
                            found.push(text.to_string());
                            if field == "data"
                                && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(text)
                            {
                                found.push(String::from_utf8_lossy(&bytes).into_owned());
                            }
                        }
                        *value = Value::String(stand_in.to_string());
                    }
                }
            }
            for inner in map.values_mut() {
                stand_in_secrets(inner, found);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| stand_in_secrets(i, found)),
        _ => {}
    }
}

/// Blank every occurrence of `secrets` out of the strings within `v`.
fn blank(v: &mut Value, secrets: &[String]) {
    match v {
        Value::String(text) => {
            for s in secrets {
                if text.contains(s.as_str()) {
                    *text = text.replace(s.as_str(), crate::egress::credentials::REDACTED);
                }
            }
        }
        Value::Object(map) => map.values_mut().for_each(|i| blank(i, secrets)),
        Value::Array(items) => items.iter_mut().for_each(|i| blank(i, secrets)),
        _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::egress::HttpRequest;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt as _;

    const PASSWORD: &str = "hunter2-correct-horse";

    fn secret(name: &str) -> Value {
        use base64::Engine as _;
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "shop"},
            "data": {"password": base64::engine::general_purpose::STANDARD.encode(PASSWORD)},
            "stringData": {"plain": PASSWORD}})
    }

    /// A reconcile that saw a Secret (as a child, a related object and a
    /// read), sent its value out, and answered with a Secret child and a
    /// status echoing it.
    fn write(recorder: &Recorder, name: &str) -> PathBuf {
        let parent = json!({"apiVersion": "x.io/v1", "kind": "App", "metadata": {"name": name, "namespace": "shop"}});
        let request = Request {
            object: parent.to_string(),
            children: vec![(Gvk::new("", "v1", "Secret"), vec![secret("child").to_string()])],
            related: vec![secret("related").to_string()],
            finalizing: false,
            attempt: 0,
            now: jiff::Timestamp::UNIX_EPOCH,
            generation: None,
            readiness: Vec::new(),
        };
        let mut call = HttpRequest::get("https://api.example.com/login");
        call.body = Some(format!("{{\"password\": \"{PASSWORD}\"}}").into_bytes());
        let exchange = Exchange { request: call, response: None, error: None };
        let outcome = Outcome {
            desired: vec![secret("generated")],
            status: Some(json!({"said": format!("the password is {PASSWORD}")})),
            events: vec![],
            requeue_after: None,
            finalized: false,
            needs_finalizer: None,
            parent_metadata: None,
        };
        recorder
            .write(
                "shop/app",
                "sha256:00",
                &request,
                vec![secret("read").to_string()],
                vec![exchange],
                &Ok(Ok(outcome)),
            )
            .unwrap()
    }

    #[test]
    fn a_recording_should_hold_no_secret_value_and_be_private() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let recorder = Recorder::new(dir.path().to_path_buf(), 1);
        let path = write(&recorder, "a");
        let expected =
            path.with_file_name(path.file_name().unwrap().to_string_lossy().replace(".yaml", ".expected.yaml"));
        let encoded = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
        for file in [&path, &expected] {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(
                !text.contains(PASSWORD) && !text.contains(&encoded),
                "a Secret's value in {}:\n{text}",
                file.display()
            );
            let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} is readable by others", file.display());
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("password: cmVkYWN0ZWQ="), "the keys stay, their values stood in for:\n{text}");
        let mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the controller's directory is open to others");
    }

    #[test]
    fn a_recording_should_never_be_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("shop_app")).unwrap();
        let recorder = Recorder::new(dir.path().to_path_buf(), 1);
        let parent = json!({"apiVersion": "x.io/v1", "kind": "App", "metadata": {"name": "a", "namespace": "shop"}});
        let request = Request {
            object: parent.to_string(),
            children: vec![],
            related: vec![],
            finalizing: false,
            attempt: 0,
            now: jiff::Timestamp::UNIX_EPOCH,
            generation: None,
            readiness: Vec::new(),
        };
        let refused = recorder.write("shop/app", "sha256:00", &request, vec![], vec![], &Ok(Ok(Outcome::default())));
        assert!(refused.is_err(), "recorded through a link");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "a file was written where the link points");
    }

    #[test]
    fn a_controllers_recordings_should_stay_within_their_bound_oldest_going_first() {
        let dir = tempfile::tempdir().unwrap();
        let one = {
            let probe = tempfile::tempdir().unwrap();
            let path = write(&Recorder::new(probe.path().to_path_buf(), 1), "probe");
            std::fs::read_dir(path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap().len())
                .sum::<u64>()
        };
        let recorder = Recorder::new(dir.path().to_path_buf(), 1).max_bytes(one * 3 + one / 2);
        let written: Vec<PathBuf> = (0..10).map(|i| write(&recorder, &format!("p{i}"))).collect();
        let folder = written[0].parent().unwrap();
        let total: u64 = std::fs::read_dir(folder).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        assert!(total <= one * 3 + one / 2, "{total} bytes kept, over the bound");
        assert!(written[9].exists() && written[7].exists(), "the newest recordings went");
        assert!(!written[0].exists(), "the oldest recording stayed");
        // A new recorder (a restart) counts what the last one left.
        let again = Recorder::new(dir.path().to_path_buf(), 1).max_bytes(one * 3 + one / 2);
        let newest = write(&again, "after");
        let total: u64 = std::fs::read_dir(folder).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        assert!(total <= one * 3 + one / 2 && newest.exists(), "{total} bytes after a restart");
    }
}
