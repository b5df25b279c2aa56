//! What a module's controller offers its owner: the version it runs, the
//! swap and the shadow candidate, its reads and its counters.

use super::*;

/// What a module's controller offers its owner (the Reconciler lifecycle,
/// `operon run`, the webhooks, tests and benches).
impl ModuleController {
    /// The module version in use.
    pub fn module(&self) -> Module {
        self.reconciler().versions().active.module.clone()
    }

    /// The shadow candidate, if one runs.
    pub fn candidate(&self) -> Option<Module> {
        self.reconciler().versions().candidate.as_ref().map(|c| c.module.clone())
    }

    /// The manifest the controller was built for (its informers and triggers).
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.reconciler().manifest
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &Config {
        &self.reconciler().config
    }

    /// Probation results and shadow differences, as they happen.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.reconciler().notices.subscribe()
    }

    /// How the shadow candidate compared so far: (compared, differing).
    pub fn shadow_counts(&self) -> (u64, u64) {
        self.reconciler().shadow.get()
    }

    /// A reader over this controller's informers, within its namespace
    /// scope, for guest calls outside a reconcile (admission webhooks): the
    /// same read grants as a reconcile of a parent in `parent_namespace`.
    pub fn reader(&self, parent_namespace: Option<String>) -> CacheReader {
        let p = self.reconciler();
        p.versions().active.reads.reader(parent_namespace, &p.config.scope)
    }

    /// Whether a reconcile waited for the guest CPU budget within `window`,
    /// and the budget (in CPUs).
    pub fn throttled(&self, window: Duration) -> Option<f64> {
        self.reconciler().budget.as_ref().filter(|b| b.throttled_within(window)).map(|b| b.cpu())
    }

    /// Whether a reconcile waited for a host-wide limit within `window`,
    /// and which (the last one).
    pub fn host_limited(&self, window: Duration) -> Option<super::HostLimit> {
        let p = self.reconciler();
        let last = *p.host_limited.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|(at, _)| at.elapsed() <= window).map(|(_, limit)| limit)
    }

    /// Admit one guest call made outside a reconcile (an admission or
    /// conversion call) against the plugin's admission budget: as large as
    /// its reconciles' (`spec.limits.cpu`), so webhooks are no way around
    /// it, and apart from it, so a flood of reviews leaves the reconciles
    /// their budget. `Ok(None)` without a budget, `Err(wait)` while it is
    /// in debt. Charge the ticket with the call's time.
    pub fn admit_guest_call(&self) -> Result<Option<GuestTicket>, Duration> {
        self.reconciler().admission_budget.as_ref().map(|b| b.admit()).transpose()
    }

    /// The guest CPU budget, in CPUs (`None`: no limit).
    pub fn guest_cpu(&self) -> Option<f64> {
        self.reconciler().budget.as_ref().map(|b| b.cpu())
    }

    /// Every informer this controller reads from (its candidate's too).
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        Reconcile::informers(&**self.reconciler())
    }

    /// Replace the module, atomically. Reconciles in flight finish on the
    /// old version; the queue is untouched; parents that failed terminally
    /// are tried again (the new version may answer otherwise). A different
    /// version starts on probation ([`Config::probation`]): its owner hears
    /// whether it passed ([`Notice`]). Any shadow candidate is dropped.
    ///
    /// # Errors
    /// [`SwapError::ManifestChanged`] if the new module declares different
    /// kinds (build a new controller for it instead).
    pub fn swap_module(&self, module: Module, probation: bool) -> Result<(), SwapError> {
        let p = self.reconciler();
        if **module.manifest() != *p.manifest {
            return Err(SwapError::ManifestChanged {
                running: format!("{:?}", p.manifest),
                new: format!("{:?}", module.manifest()),
            });
        }
        {
            let mut v = p.versions_mut();
            let same = v.active.module.info().digest == module.info().digest;
            v.active.module = module;
            if !same {
                v.probation = probation.then_some((0, 0));
            }
            v.candidate = None;
        }
        let info = self.module().info().clone();
        p.metrics.module_loaded(self.name(), &info.digest, info.compile_time);
        p.metrics.module_swap(self.name(), "swapped");
        self.retry_terminal();
        Ok(())
    }

    /// Run `candidate` beside the active version on every reconcile without
    /// applying anything of it, and compare ([`ModuleController::shadow_counts`],
    /// [`Notice::ShadowDiffers`]); `None` stops. Counts restart. The
    /// candidate may read other kinds than the active version (its own
    /// informers are started); it must reconcile the same kind.
    ///
    /// # Errors
    /// [`SwapError::OtherKind`] if the candidate reconciles another kind.
    pub fn set_candidate(&self, candidate: Option<Module>) -> Result<(), SwapError> {
        let p = self.reconciler();
        let version = match candidate {
            None => None,
            Some(module) if module.manifest().for_kind != p.manifest.for_kind => {
                return Err(SwapError::OtherKind {
                    running: p.manifest.for_kind.to_string(),
                    new: module.manifest().for_kind.to_string(),
                });
            }
            Some(module) => {
                let active = p.versions().active.clone();
                let reads = if request::same_reads(module.manifest(), active.module.manifest()) {
                    active.reads
                } else {
                    Arc::new(ReadSet::new(module.manifest(), &p.parents, &p.cache, p.config.namespace.as_deref()))
                };
                Some(Version { module, reads })
            }
        };
        p.versions_mut().candidate = version;
        p.shadow.reset();
        Ok(())
    }
}

/// Why a module could not be swapped in or shadowed.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// A swapped-in module must declare the same kinds.
    #[error(
        "the new module's manifest differs from the running one (running {running}, new {new}); build a new controller to change what it watches"
    )]
    ManifestChanged {
        /// The running manifest.
        running: String,
        /// The new one.
        new: String,
    },
    /// A shadow candidate must reconcile the same kind.
    #[error("a shadow candidate must reconcile the running kind {running}, not {new}")]
    OtherKind {
        /// The running kind.
        running: String,
        /// The candidate's.
        new: String,
    },
}
