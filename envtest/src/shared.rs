//! Control planes shared by the tests of a process.
//!
//! Starting a control plane costs seconds; a test costs milliseconds. So
//! tests share one, started on first use, and stay out of each other's way
//! by working in namespaces of their own.
//!
//! One test binary may hold many suites, each wanting its own CRDs and
//! processes (the controller manager, workloads) and isolation from the
//! others' cluster-wide objects: [`shared_named`] keeps one control plane
//! per name. A control plane no test has used for [`IDLE`] is stopped (a
//! test "uses" it from the moment it asks for it until its thread ends,
//! which for a libtest test is when the test ends), and started again if a
//! later test asks for it: a binary running its suites one after the other
//! keeps only the current ones' processes running.

use crate::{ControlPlane, Options};
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a shared control plane nobody uses keeps running.
pub const IDLE: Duration = Duration::from_secs(20);

/// The control plane shared by every test in this process, started on first
/// call, with the controller manager (so garbage collection works).
///
/// # Guarantees
///
/// Started once even when tests call this concurrently. Never dropped, yet
/// its processes stop and its directory goes when the test binary exits.
///
/// # Panics
///
/// If it did not start, in every test that calls this, with the reason
/// (often: run `cargo xtask envtest` first).
pub fn shared() -> &'static Shared {
    shared_named("shared", Options::with_controller_manager)
}

/// [`shared`], started with the options `make` returns: typically
/// [`Options::with_controller_manager`] plus the CRDs under test (see
/// [`Options::crds`]).
///
/// # Caveats
///
/// The first caller starts it: `make` runs only then, and later callers get
/// that control plane whatever they pass. Call this from one helper per
/// suite, or use [`shared_named`] when one binary holds several suites.
pub fn shared_with(make: impl FnOnce() -> Options) -> &'static Shared {
    shared_named("shared", make)
}

/// The control plane this process shares under `name`, started with the
/// options `make` returns when no test used it for [`IDLE`] (or ever).
/// Deref it to a [`ControlPlane`].
///
/// # Caveats
///
/// Every caller of one name must pass the same options: `make` runs only
/// when the control plane starts. A control plane may be stopped between
/// two tests that use it, so nothing a test leaves in it is for the next
/// test to find.
///
/// # Panics
///
/// If it did not start, with the reason (often: run `cargo xtask envtest`
/// first).
pub fn shared_named(name: &'static str, make: impl FnOnce() -> Options) -> &'static Shared {
    static PLANES: OnceLock<Mutex<HashMap<&'static str, &'static Shared>>> = OnceLock::new();
    let shared = {
        let mut planes = PLANES.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *planes.entry(name).or_insert_with(|| {
            let shared: &'static Shared = Box::leak(Box::new(Shared {
                name,
                current: Mutex::new(None),
                users: AtomicUsize::new(0),
                idle_since: Mutex::new(None),
            }));
            reaper().lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(shared);
            shared
        })
    };
    shared.use_from_this_thread();
    let mut current = shared.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if current.is_none() {
        match ControlPlane::start(make()) {
            // Leaked: references handed out stay valid; a stopped one holds
            // no process, only its struct.
            Ok(plane) => *current = Some(Box::leak(Box::new(plane))),
            Err(e) => panic!("the shared envtest control plane {name:?} did not start: {e:#}"),
        }
    }
    shared
}

/// A control plane shared by name: derefs to the one running now.
pub struct Shared {
    name: &'static str,
    current: Mutex<Option<&'static ControlPlane>>,
    /// Threads (tests) using it now.
    users: AtomicUsize,
    /// Since when nobody uses it.
    idle_since: Mutex<Option<Instant>>,
}

impl std::ops::Deref for Shared {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        let current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        current.unwrap_or_else(|| panic!("the shared control plane {:?} was stopped while in use", self.name))
    }
}

thread_local! {
    /// The shared control planes this thread uses, released when it ends.
    static USING: RefCell<Vec<Using>> = const { RefCell::new(Vec::new()) };
}

/// This thread's use of a shared control plane.
struct Using(&'static Shared);

impl Drop for Using {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.0.idle_since.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        }
    }
}

impl Shared {
    fn use_from_this_thread(&'static self) {
        USING.with(|using| {
            let mut using = using.borrow_mut();
            if !using.iter().any(|u| std::ptr::eq(u.0, self)) {
                self.users.fetch_add(1, Ordering::AcqRel);
                *self.idle_since.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                using.push(Using(self));
            }
        });
    }

    /// Stop it if nobody used it for `idle`.
    fn stop_if_idle(&self, idle: Duration) {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = *self.idle_since.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.users.load(Ordering::Acquire) == 0
            && since.is_some_and(|s| s.elapsed() >= idle)
            && let Some(plane) = current.take()
        {
            plane.stop();
        }
    }
}

/// The shared control planes, looked at every second by a thread that
/// stops the idle ones.
fn reaper() -> &'static Mutex<Vec<&'static Shared>> {
    static ALL: OnceLock<Mutex<Vec<&'static Shared>>> = OnceLock::new();
    ALL.get_or_init(|| {
        std::thread::Builder::new()
            .name("envtest-reaper".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                    let all: Vec<&'static Shared> =
                        reaper().lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    for shared in all {
                        shared.stop_if_idle(IDLE);
                    }
                }
            })
            .expect("a thread for the envtest reaper");
        Mutex::default()
    })
}

/// Creates a namespace named `<prefix>-<random suffix>` and returns its
/// name, so a test can work on a shared control plane undisturbed.
///
/// The namespace is not deleted afterwards: the control plane is thrown
/// away soon enough, and what a failed test left is worth a look with
/// `OPERON_ENVTEST_KEEP=1`.
pub async fn create_namespace(client: &kube::Client, prefix: &str) -> Result<String> {
    let namespace = Namespace {
        metadata: ObjectMeta { generate_name: Some(format!("{prefix}-")), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    let created = kube::Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("could not create a namespace for `{prefix}`"))?;
    created.metadata.name.context("the API server returned a namespace without a name")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_should_count_as_a_user_until_it_ends() {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            name: "t",
            current: Mutex::new(None),
            users: AtomicUsize::new(0),
            idle_since: Mutex::new(None),
        }));
        let t = std::thread::spawn(move || {
            shared.use_from_this_thread();
            shared.use_from_this_thread();
            shared.users.load(Ordering::Acquire)
        });
        assert_eq!(t.join().unwrap(), 1, "a thread counts once");
        assert_eq!(shared.users.load(Ordering::Acquire), 0, "released when the thread ended");
        assert!(shared.idle_since.lock().unwrap().is_some());
    }
}
