//! Making the controller run what the plan says: start, swap, rebuild or
//! stop it, with its shadow candidate; and releasing the parents a module
//! no longer holds.

use super::*;
use crate::pipeline;

impl Lifecycle {
    /// Make the controller run what the plan says. Returns whether a new
    /// controller was built.
    pub(super) async fn converge(
        &self,
        key: &PluginKey,
        name: &str,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        settings: Option<&Settings>,
        plan: &Plan,
    ) -> Result<bool, StepError> {
        let (Some(serve), Some(s)) = (&plan.serve, settings) else {
            let controller = plugin.lock().unwrap_or_else(|e| e.into_inner()).controller.take();
            if controller.is_some() {
                self.stop_controller(name, plugin).await;
            }
            return Ok(false);
        };
        let (module, current, built_with) = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            let Some(held) = p.modules.get(&serve.digest) else { return Ok(false) };
            (held.module.clone(), p.controller.clone(), p.built_with.clone())
        };
        let old_finalizer = current.as_ref().and_then(|c| c.manifest().finalizer.clone());
        let reusable = current.as_ref().is_some_and(|c| {
            **c.manifest() == **module.manifest() && built_with.as_deref() == Some(s.fingerprint.as_str())
        });
        let mut rebuilt = false;
        if let (true, Some(c)) = (reusable, &current) {
            if !same_module(&c.module(), &module) {
                let from = c.module().info().digest.clone();
                if c.swap_module(module.clone(), serve.probation).is_ok() && from != serve.digest {
                    plugin.lock().unwrap_or_else(|e| e.into_inner()).last_swap = Some(Time(Timestamp::now()));
                }
            }
        } else {
            // First start, or the manifest or settings changed: a new
            // controller under the same leadership. The old one's informers
            // are held until the new one has joined them, so shared watches
            // do not restart.
            let held = current.as_ref().map(ModuleController::informers);
            let config = pipeline::Config { name: Some(name.to_string()), ..s.pipeline.clone() };
            let controller = self.manager.build_controller(module.clone(), config, s.client.clone(), serve.probation);
            if current.is_some() {
                self.stop_controller(name, plugin).await;
            }
            self.manager.start(controller.clone(), leadership.clone()).map_err(StepError::Start)?;
            drop(held);
            self.watch_notices(key, plugin, &controller);
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            if current.as_ref().is_none_or(|c| c.module().info().digest != serve.digest) {
                p.last_swap = Some(Time(Timestamp::now()));
            }
            p.controller = Some(controller);
            p.built_with = Some(s.fingerprint.clone());
            p.candidate = None;
            rebuilt = true;
            // Parents that left the selector are released from its finalizer.
            let old_selector = std::mem::replace(&mut p.selector, s.pipeline.parent_selector.clone());
            if let (Some(f), Some(old)) = (module.manifest().finalizer.clone(), old_selector)
                && current.is_some()
                && s.pipeline.parent_selector.as_ref() != Some(&old)
            {
                let new = s.pipeline.parent_selector.clone();
                self.release_later(key, leadership, s, &module, f, move |parent: &CachedObject| {
                    old.matches(parent) && !new.as_ref().is_some_and(|n| n.matches(parent))
                });
            }
        }
        // A new module that names another finalizer: the old one is released.
        if let Some(f) = &module.manifest().finalizer {
            plugin.lock().unwrap_or_else(|e| e.into_inner()).finalizers.insert(f.clone());
        }
        if let Some(old) = old_finalizer
            && module.manifest().finalizer.as_ref() != Some(&old)
        {
            let selector = s.pipeline.parent_selector.clone();
            self.release_later(key, leadership, s, &module, old, move |parent: &CachedObject| {
                selector.as_ref().is_none_or(|sel| sel.matches(parent))
            });
        }
        // The shadow candidate.
        let controller = plugin.lock().unwrap_or_else(|e| e.into_inner()).controller.clone();
        if let Some(c) = controller {
            let (want, have) = {
                let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                (plan.candidate.as_ref().and_then(|d| p.modules.get(d).map(|h| h.module.clone())), p.candidate.clone())
            };
            if plan.candidate != have {
                if let Err(e) = c.set_candidate(want) {
                    tracing::warn!(plugin = %key, error = %e, "shadow candidate not started");
                } else {
                    plugin.lock().unwrap_or_else(|e| e.into_inner()).candidate = plan.candidate.clone();
                }
            }
        }
        // Versions no longer needed are dropped (the plan keeps what it may
        // roll back to).
        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        let keep: BTreeSet<String> =
            [Some(serve.digest.clone()), plan.candidate.clone(), plan.restore.clone(), plan.load.clone()]
                .into_iter()
                .flatten()
                .chain(p.local.iter().filter_map(|r| match r {
                    Record::Probation { previous, .. } => previous.clone(),
                    _ => None,
                }))
                .collect();
        let limit = 4;
        if p.modules.len() > limit {
            let drop: Vec<String> =
                p.modules.keys().filter(|d| !keep.contains(*d)).take(p.modules.len() - limit).cloned().collect();
            for d in drop {
                p.modules.remove(&d);
            }
        }
        Ok(rebuilt)
    }

    pub(super) async fn stop_controller(&self, name: &str, plugin: &Arc<Mutex<Plugin>>) {
        {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            p.controller = None;
            p.built_with = None;
            p.candidate = None;
            if let Some(n) = p.notices.take() {
                n.abort();
            }
        }
        self.manager.remove(name).await;
    }

    /// Listen to a controller's probation results and shadow differences.
    pub(super) fn watch_notices(&self, key: &PluginKey, plugin: &Arc<Mutex<Plugin>>, controller: &ModuleController) {
        let mut rx = controller.notices();
        let (plugin2, key2, tx) = (Arc::downgrade(plugin), key.clone(), self.enqueue.clone());
        let leadership = plugin.lock().unwrap_or_else(|e| e.into_inner()).leadership.clone();
        let recorder = self.recorder.clone();
        let reference = self.reference(key);
        let task = tokio::spawn(async move {
            loop {
                let notice = match rx.recv().await {
                    Ok(n) => n,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(plugin) = plugin2.upgrade() else { return };
                match notice {
                    Notice::ProbationFailed { digest, reason } => {
                        let message = format!(
                            "{} was rolled back: {reason}; fix the module and publish a new version",
                            plan::short(&digest)
                        );
                        plugin.lock().unwrap_or_else(|e| e.into_inner()).inbox.push(Record::Refuse(Refusal {
                            digest,
                            reason: Reason::RolledBack,
                            message,
                        }));
                    }
                    Notice::ProbationPassed { digest } => {
                        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                        p.inbox.push(Record::LastGood(digest));
                        p.inbox.push(Record::EndProbation);
                    }
                    Notice::ShadowDiffers { sample } => {
                        if let (Some(l), Some(r)) = (&leadership, &reference) {
                            publish(recorder.clone(), r.clone(), l.clone(), false, "ShadowDiffers", sample);
                        }
                        continue;
                    }
                }
                let _ = tx.send(key2.clone());
            }
        });
        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = p.notices.replace(task.abort_handle()) {
            old.abort();
        }
    }

    /// The `for` kind of what the plugin ran.
    pub(super) fn kind_of(&self, plugin: &Arc<Mutex<Plugin>>) -> Option<Gvk> {
        let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        p.controller
            .as_ref()
            .map(|c| c.manifest().for_kind.clone())
            .or_else(|| p.modules.values().next().map(|h| h.module.manifest().for_kind.clone()))
    }

    /// Release a finalizer from the parents `filter` picks, in a task of
    /// its own (by the leader).
    pub(super) fn release_later(
        &self,
        key: &PluginKey,
        leadership: &Leadership,
        s: &Settings,
        module: &Module,
        finalizer: String,
        filter: impl Fn(&CachedObject) -> bool + Send + Sync + 'static,
    ) {
        let (manager, leadership, s, kind) =
            (self.manager.clone(), leadership.clone(), s.clone(), module.manifest().for_kind.clone());
        let key = key.clone();
        tokio::spawn(async move {
            if !leadership.leading_within(DECIDE).await {
                return;
            }
            tracing::info!(plugin = %key, %finalizer, "releasing parents from a finalizer the module no longer uses");
            super::super::release::release(&manager, &kind, &s, &finalizer, leadership.fence(), filter).await;
        });
    }
}
