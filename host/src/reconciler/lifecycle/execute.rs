//! One lifecycle step: observe, plan, carry out.

use super::*;

impl Reconcile for Lifecycle {
    type Key = PluginKey;
    type Error = StepError;

    fn reconcile(&self, key: &PluginKey, _ctx: &Context) -> impl Future<Output = Result<Action, StepError>> + Send {
        self.step(key)
    }
}

impl Lifecycle {
    pub(super) async fn step(&self, key: &PluginKey) -> Result<Action, StepError> {
        let Some(observed) = self.observe(key) else {
            self.forget(key).await;
            return Ok(Action::Done);
        };
        let name = self.name(key);
        let plugin = self.plugin(key);
        let (leadership, new) = {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            match &p.leadership {
                Some(l) => (l.clone(), false),
                None => {
                    // Not ready until its module is loaded here: a replica
                    // that is still starting leaves a free Lease to a warm
                    // standby.
                    let l = self.manager.leadership_with(&name, crate::leader::Ability::Warming);
                    p.leadership = Some(l.clone());
                    (l, true)
                }
            }
        };
        if new {
            self.watch_leadership(key, &plugin, &leadership);
        }
        let host = settings::Host {
            kube_config: self.config.kube_config.as_ref(),
            pipeline: &self.pipeline,
            require_service_account: self.config.require_service_account,
            max_output: self.config.max_output,
        };
        let derived: Result<Settings, InvalidSpec> = observed.spec.clone().and_then(|spec| {
            let mut s = settings::derive(key, &spec, &host)?;
            if let PluginKey::File(path) = key
                && let Some((file, _)) = self.files.get(path)
            {
                // A module file: what the command line says, every kind its
                // manifest asks for, in its namespace (or all).
                s.limits = file.limits.clone();
                s.pipeline.namespace = file.namespace.clone();
                s.pipeline.scope = match &file.namespace {
                    Some(ns) => crate::pipeline::Scope {
                        namespaces: Some(vec![ns.clone()]),
                        cluster: true,
                        references_across_namespaces: true,
                    },
                    None => crate::pipeline::Scope::all(),
                };
                s.pipeline.grants = crate::pipeline::Grants::default();
                s.fingerprint = format!("file {}", path.display());
            }
            Ok(s)
        });

        // The source and the loads, only for a spec that can be acted on.
        let mut facts = SourceFacts { source: Source::Pending, fetched: None, retry: false };
        if let (Ok(spec), Ok(s), false) = (&observed.spec, &derived, observed.deleting) {
            facts = self.source(key, spec, s).await;
            self.refresh_limits(key, &plugin, s).await;
            self.resolve_kinds(&plugin).await;
        }
        let cleared = observed.retry.is_some() && observed.retry != observed.status.retry;
        let (inputs_owned, live) = {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            let inbox = std::mem::take(&mut p.inbox);
            p.local.extend(inbox);
            if cleared && p.retry != observed.retry {
                p.local.retain(|r| !matches!(r, Record::Refuse(_)));
                p.retry = observed.retry.clone();
            }
            let durable = super::record(&observed.status, &mut p.local, leadership.is_leading(), cleared);
            let spec = match (&observed.spec, &derived) {
                (Err(e), _) | (_, Err(e)) => Spec::Invalid(e.to_string()),
                (Ok(spec), Ok(_)) => Spec::Valid {
                    paused: spec.paused,
                    shadow: spec.rollout == super::super::crd::Rollout::Shadow,
                    admission: spec.admission.is_some(),
                    webhooks_served: self.manager.webhooks().is_some(),
                },
            };
            let limits = derived.as_ref().map(|s| s.limits.clone()).unwrap_or_default();
            let load = match &facts.source {
                Source::Holds(d) if !p.modules.contains_key(d) => match self.loader.peek(key, d, &limits) {
                    None => plan::Load::Idle,
                    Some(loader::Load::Running) => plan::Load::Loading,
                    Some(loader::Load::Done(_)) => plan::Load::Loaded,
                    Some(loader::Load::Failed(e)) => {
                        plan::Load::Failed { reason: status::load_reason(&e), message: load_message(&e) }
                    }
                    Some(loader::Load::Missing) => plan::Load::Idle,
                },
                _ => plan::Load::Idle,
            };
            let mut restores = BTreeMap::new();
            for d in durable.last_good.iter().chain(durable.probation.as_ref().and_then(|(_, prev)| prev.as_ref())) {
                if p.modules.contains_key(d) {
                    continue;
                }
                let state = match self.loader.peek(key, d, &limits) {
                    None => Restore::Idle,
                    Some(loader::Load::Running) => Restore::Loading,
                    Some(loader::Load::Done(_)) => Restore::Idle,
                    Some(loader::Load::Missing | loader::Load::Failed(_)) => Restore::Unavailable,
                };
                restores.insert(d.clone(), state);
            }
            let placement = key.placement();
            let modules: BTreeMap<String, plan::Module> = p
                .modules
                .iter()
                .map(|(d, h)| {
                    let forbidden = match (&observed.spec, key) {
                        (_, PluginKey::File(_)) => {
                            let refused = super::super::grants::reserved_uses(h.module.manifest());
                            (!refused.is_empty())
                                .then(|| format!("the module asks for what no plugin may have: {}", refused.join("; ")))
                        }
                        (Ok(spec), _) => super::super::grants::check(h.module.manifest(), &spec.grants)
                            .err()
                            .map(|f| f.to_string())
                            .or_else(|| namespaced_cluster_kind(&placement, h)),
                        (Err(_), _) => None,
                    };
                    let overlaps = match (&self.peers, &observed.spec, derived.as_ref()) {
                        (Some(peers), Ok(spec), Ok(s)) => peers.overlapping(&super::super::peers::Claim {
                            key,
                            created: observed.created.as_ref(),
                            kind: &h.module.manifest().for_kind,
                            namespaces: s.pipeline.scope.namespaces.as_deref(),
                            selector: spec.selector.as_ref(),
                            annotations: spec.annotation_selector.as_ref().map(|a| a.as_label_selector()).as_ref(),
                        }),
                        _ => None,
                    };
                    let untrusted = match &observed.spec {
                        Ok(spec) if !self.loader.verified(key, &spec.module, d) => Some(format!(
                            "module {} was not verified against the keys now required (spec.module.verify{}): \
                             it is fetched and checked again, and serves only if its signature verifies",
                            plan::short(d),
                            if self.loader.policy().trust().is_some() { ", --require-signed-modules" } else { "" },
                        )),
                        _ => None,
                    };
                    (
                        d.clone(),
                        plan::Module {
                            digest: d.clone(),
                            forbidden,
                            overlaps,
                            untrusted,
                            admission: h.module.admission(),
                        },
                    )
                })
                .collect();
            let live = Live {
                serving: p.controller.as_ref().map(|c| c.module().info().digest.clone()),
                candidate: p.candidate.clone(),
                admission: p.admission.is_some(),
                problem: p.problem.clone(),
                settings_changed: p.controller.is_some()
                    && derived.as_ref().is_ok_and(|s| p.built_with.as_deref() != Some(s.fingerprint.as_str())),
            };
            ((spec, load, restores, modules, durable), live)
        };
        let (spec, load, restores, modules, durable) = &inputs_owned;
        // A version to roll back to that this replica could not load yet is
        // asked for again (its bytes may be kept a moment later).
        let restore_unavailable = restores.values().any(|r| *r == Restore::Unavailable);
        let plan = plan::plan(&Inputs {
            spec,
            deleting: observed.deleting,
            source: &facts.source,
            load,
            modules,
            restores,
            durable,
            live: &live,
        });
        tracing::debug!(plugin = %key, ?plan, "lifecycle plan");
        // Nothing to serve here because this replica cannot get it (the
        // source unreachable or refused from here, a rollback version it
        // lacks): the unit's Lease goes to a replica that can, if any. Not
        // yet, because its module is still being fetched or loaded here:
        // a replica that serves it already takes a free Lease first.
        let stuck_here = matches!(facts.source, Source::Unavailable(_) | Source::Refused(_) | Source::Untrusted(_))
            || restore_unavailable;
        let warming = matches!(spec, Spec::Valid { paused: false, .. })
            && !observed.deleting
            && match &facts.source {
                Source::Pending => true,
                Source::Holds(d) => !modules.contains_key(d) && !matches!(load, plan::Load::Failed { .. }),
                Source::Unavailable(_) | Source::Refused(_) | Source::Untrusted(_) => false,
            };
        leadership.set_ability(if plan.serve.is_some() || live.serving.is_some() {
            crate::leader::Ability::Ready
        } else if stuck_here {
            crate::leader::Ability::Unable
        } else if warming {
            crate::leader::Ability::Warming
        } else {
            crate::leader::Ability::Ready
        });
        let outcome = self
            .execute(key, &name, &plugin, &leadership, &observed, derived.as_ref().ok(), &facts, &plan, durable)
            .await;
        let settled = plan.serve.is_some()
            && (!plan.admission || plugin.lock().unwrap_or_else(|e| e.into_inner()).admission.is_some())
            || plan.problem.as_ref().is_some_and(|(r, _)| *r != Reason::Loading)
            || matches!(spec, Spec::Invalid(_) | Spec::Valid { paused: true, .. });
        if settled {
            self.mark_settled(key);
        }
        outcome?;
        if restore_unavailable {
            return Ok(Action::RequeueAfter(loader::RESTORE_RETRY));
        }
        if facts.retry {
            if let Source::Unavailable(m) | Source::Untrusted(m) = &facts.source {
                return Err(StepError::Source(m.clone()));
            }
        }
        Ok(Action::Done)
    }

    /// What the source holds: without fetching when what it pins, or what
    /// it held when last read, is loaded; otherwise read (a path at once;
    /// a ConfigMap, a URL or an OCI artifact in a task of its own).
    pub(super) async fn source(&self, key: &PluginKey, spec: &PluginSpec, s: &Settings) -> SourceFacts {
        let _ = s;
        let plugin = self.plugin(key);
        if let Some(pinned) = self.loader.pinned(&spec.module)
            && plugin.lock().unwrap_or_else(|e| e.into_inner()).modules.contains_key(&pinned)
            && self.loader.verified(key, &spec.module, &pinned)
        {
            return SourceFacts { source: Source::Holds(pinned), fetched: None, retry: false };
        }
        let config_map = match (&spec.module.config_map, key) {
            (Some(cm), PluginKey::Reconciler(k)) => {
                let ns = k.namespace.clone().unwrap_or_default();
                let informer = self.config_map_informer(key, &plugin, ObjectKey::new(Some(&ns), &cm.name));
                if !informer.is_synced() {
                    return SourceFacts { source: Source::Pending, fetched: None, retry: false };
                }
                Some(informer.store().get(&ObjectKey::new(Some(&ns), &cm.name)).cloned())
            }
            _ => None,
        };
        // Fetched and loaded before, and the source (and the ConfigMap's
        // version) unchanged: nothing to read.
        if let Some(known) = self.loader.known(key, &spec.module, config_map.clone().flatten().as_deref())
            && plugin.lock().unwrap_or_else(|e| e.into_inner()).modules.contains_key(&known)
            && self.loader.verified(key, &spec.module, &known)
        {
            return SourceFacts { source: Source::Holds(known), fetched: None, retry: false };
        }
        let allow_paths = self.config.allow_module_paths || matches!(key, PluginKey::File(_));
        match self.loader.fetch(key, &spec.module, config_map, allow_paths).await {
            Fetch::Running => SourceFacts { source: Source::Pending, fetched: None, retry: false },
            Fetch::Done(f) => SourceFacts { source: Source::Holds(f.digest.clone()), fetched: Some(f), retry: false },
            Fetch::Failed { error: error @ super::super::source::Error::Untrusted { .. }, retry } => {
                SourceFacts { source: Source::Untrusted(error.to_string()), fetched: None, retry }
            }
            Fetch::Failed { error, retry: true } => {
                SourceFacts { source: Source::Unavailable(error.to_string()), fetched: None, retry: true }
            }
            Fetch::Failed { error, retry: false } => {
                SourceFacts { source: Source::Refused(error.to_string()), fetched: None, retry: false }
            }
        }
    }

    /// The informer of the one ConfigMap a plugin's source names; its
    /// changes reconcile the plugin. Released with the plugin.
    pub(super) fn config_map_informer(
        &self,
        key: &PluginKey,
        plugin: &Arc<Mutex<Plugin>>,
        cm: ObjectKey,
    ) -> Arc<Informer> {
        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, informer, _)) = &p.config_map
            && *k == cm
        {
            return informer.clone();
        }
        let mut watch = WatchKey::new(Gvk::new("", "v1", "ConfigMap"), cm.namespace.clone());
        watch.fields = Some(format!("metadata.name={}", cm.name));
        // Its metadata tells that it changed; the loader reads the module.
        watch.metadata_only = true;
        let informer = self.manager.cache().informer(watch);
        let mut rx = informer.subscribe();
        let (tx, key) = (self.enqueue.clone(), key.clone());
        let task = tokio::spawn(async move {
            while rx.recv().await.is_some() {
                let _ = tx.send(key.clone());
            }
        });
        if let Some((_, _, old)) = p.config_map.replace((cm, informer.clone(), task.abort_handle())) {
            old.abort();
        }
        informer
    }

    /// Take finished loads out of the loader, and reload held versions whose
    /// limits the spec changed (from the compiled cache: milliseconds).
    pub(super) async fn refresh_limits(&self, key: &PluginKey, plugin: &Arc<Mutex<Plugin>>, s: &Settings) {
        let mut done = Vec::new();
        let digests: Vec<String> = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            p.modules.keys().cloned().collect()
        };
        for d in self.loader.finished(key, &s.limits) {
            done.push(d);
        }
        let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
        for (digest, module) in done {
            self.loader.take(key, &digest, &s.limits);
            p.modules.insert(digest, Held { module, cluster_scoped_kind: None });
        }
        // Held versions loaded with other limits are loaded again; until
        // then the old one is what there is.
        for d in digests {
            let stale = p.modules.get(&d).is_some_and(|h| !same_limits(h.module.limits(), &s.limits));
            if stale {
                drop(p);
                let _ = self.loader.load(key, &d, None, &s.limits);
                p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Learn whether each held module's `for` kind is cluster-scoped (a
    /// namespaced Reconciler may not reconcile one).
    pub(super) async fn resolve_kinds(&self, plugin: &Arc<Mutex<Plugin>>) {
        let unresolved: Vec<(String, Gvk)> = {
            let p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            p.modules
                .iter()
                .filter(|(_, h)| h.cluster_scoped_kind.is_none())
                .map(|(d, h)| (d.clone(), h.module.manifest().for_kind.clone()))
                .collect()
        };
        for (digest, kind) in unresolved {
            if let Ok((_, namespaced)) = crate::cache::resolve(self.manager.client(), &kind).await {
                let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(h) = p.modules.get_mut(&digest) {
                    h.cluster_scoped_kind = Some(!namespaced);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments, reason = "one step's observations, passed once")]
    pub(super) async fn execute(
        &self,
        key: &PluginKey,
        name: &str,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        observed: &Observed,
        settings: Option<&Settings>,
        facts: &SourceFacts,
        plan: &Plan,
        durable: &Durable,
    ) -> Result<(), StepError> {
        // 1. The durable record.
        let mut durable = durable.clone();
        {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            for r in &plan.records {
                apply_record(&mut durable, r);
                p.local.push(r.clone());
                if let Record::Refuse(refusal) = r {
                    tracing::warn!(plugin = %key, digest = %refusal.digest, reason = refusal.reason.as_str(), "module refused: {}", refusal.message);
                    self.manager.metrics().module_swap(name, "refused");
                }
            }
        }
        if plan.events.iter().any(|e| e.reason == "RolledBack") {
            self.manager.metrics().module_swap(name, "rolled_back");
        }
        // 2. Loads asked for.
        if let Some(s) = settings {
            if let (Some(d), Some(f)) = (&plan.load, &facts.fetched) {
                let _ = self.loader.load(key, d, Some(f.clone()), &s.limits);
            }
            if let Some(d) = &plan.restore {
                let _ = self.loader.load(key, d, None, &s.limits);
            }
        }
        // 3. The controller.
        let rebuilt = self.converge(key, name, plugin, leadership, settings, plan).await?;
        // 4. The webhooks.
        self.sync_admission(key, plugin, leadership, observed, settings, plan, rebuilt).await?;
        self.sync_conversion(key, plugin, leadership, observed).await?;
        // 5. Events and the status.
        for e in &plan.events {
            self.event(key, leadership, e.warning, e.reason, &e.message);
        }
        {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            p.problem = plan.problem.clone();
        }
        self.write_status(key, plugin, leadership, observed, facts, plan, &durable).await;
        // 6. Deleting: release what the plugin holds, then let it go.
        if plan.clean_up {
            self.clean_up(key, plugin, leadership, observed).await;
        } else if let Some(object) = &observed.object
            && !observed.has_release_finalizer
            && plan.serve.is_some()
            && !plugin.lock().unwrap_or_else(|e| e.into_inner()).finalizers.is_empty()
            && leadership.is_leading()
        {
            super::super::release::hold(self.manager.client(), key, object).await;
        }
        Ok(())
    }

    /// Deleting: the leader releases the parents from the module's
    /// finalizers, then removes its own finalizer from the Reconciler.
    pub(super) async fn clean_up(
        &self,
        key: &PluginKey,
        plugin: &Arc<Mutex<Plugin>>,
        leadership: &Leadership,
        observed: &Observed,
    ) {
        if !leadership.is_leading() {
            return;
        }
        let Some(object) = &observed.object else { return };
        let finalizers: Vec<String> =
            plugin.lock().unwrap_or_else(|e| e.into_inner()).finalizers.iter().cloned().collect();
        if let Ok(spec) = &observed.spec
            && let Some(kind) = self.kind_of(plugin)
        {
            let host = settings::Host {
                kube_config: self.config.kube_config.as_ref(),
                pipeline: &self.pipeline,
                require_service_account: self.config.require_service_account,
                max_output: self.config.max_output,
            };
            if let Ok(s) = settings::derive(key, spec, &host) {
                for f in &finalizers {
                    let selector = s.pipeline.parent_selector.clone();
                    super::super::release::release(
                        &self.manager,
                        &kind,
                        &s,
                        f,
                        leadership.fence(),
                        move |parent: &CachedObject| selector.as_ref().is_none_or(|sel| sel.matches(parent)),
                    )
                    .await;
                }
            }
        }
        super::super::release::let_go(self.manager.client(), key, object).await;
    }

    /// The plugin is gone (its Reconciler deleted): stop everything of it
    /// and forget it.
    pub(super) async fn forget(&self, key: &PluginKey) {
        let plugin = self.plugins.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        if let Some(set) = self.unsettled.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            set.remove(key);
        }
        self.loader.forget(key);
        let Some(plugin) = plugin else { return };
        let name = self.name(key);
        let (leadership, registered, config_map, conversion) = {
            let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(task) = p.leading.take() {
                task.abort();
            }
            (p.leadership.clone(), p.admission.take(), p.config_map.take(), p.conversion.take())
        };
        if let Some((_, _, task)) = config_map {
            task.abort();
        }
        self.stop_controller(&name, &plugin).await;
        if let (Some(webhooks), Some(_)) = (self.manager.webhooks(), registered) {
            let leading = leadership.as_ref().is_some_and(Leadership::is_leading);
            if let Err(e) = webhooks.unregister(&key.webhook_name(&name), leading).await {
                tracing::warn!(plugin = %key, error = %e, "removing the webhook configurations failed");
            }
        }
        if let (Some(webhooks), Some(_)) = (self.manager.webhooks(), conversion) {
            let fence = leadership.as_ref().filter(|l| l.is_leading()).map(Leadership::fence);
            match webhooks.unregister_conversion(&key.webhook_name(&name), fence.as_ref()).await {
                Ok(Some(kind)) => self.relist_converted(&kind),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(plugin = %key, error = %e, "giving the CRD its conversion settings back failed")
                }
            }
        }
        if let Some(l) = leadership {
            l.retire();
        }
        tracing::info!(plugin = %key, "Reconciler gone: its controller stopped");
    }

    /// Shutdown: stop every plugin's controller. Webhook configurations and
    /// Leases are left to the other replicas (released, not deleted).
    pub(in crate::reconciler) async fn shut_down(&self) {
        let plugins: Vec<(PluginKey, Arc<Mutex<Plugin>>)> =
            std::mem::take(&mut *self.plugins.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
        for (key, plugin) in plugins {
            let name = self.name(&key);
            {
                let mut p = plugin.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((_, _, task)) = p.config_map.take() {
                    task.abort();
                }
                if let Some(task) = p.leading.take() {
                    task.abort();
                }
            }
            self.stop_controller(&name, &plugin).await;
        }
    }

    /// The object reference of a Reconciler, for events.
    pub(super) fn reference(&self, key: &PluginKey) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
        let kind = key.kind()?;
        let object_key = key.object_key()?;
        let uid = self.observe(key).and_then(|o| o.object).and_then(|o| o.uid().map(str::to_string));
        Some(k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(format!("{}/{}", super::super::GROUP, super::super::VERSION)),
            kind: Some(kind.into()),
            name: Some(object_key.name.clone()),
            namespace: object_key.namespace.clone(),
            uid,
            ..Default::default()
        })
    }

    /// Record an event on the Reconciler (a module file: a log line), by
    /// the replica that leads it — waiting for that to be decided, so that
    /// a new plugin's first events are not lost.
    pub(super) fn event(
        &self,
        key: &PluginKey,
        leadership: &Leadership,
        warning: bool,
        reason: &'static str,
        message: &str,
    ) {
        let Some(reference) = self.reference(key) else {
            if warning {
                tracing::warn!(plugin = %key, reason, "{message}");
            } else {
                tracing::info!(plugin = %key, reason, "{message}");
            }
            return;
        };
        publish(self.recorder.clone(), reference, leadership.clone(), warning, reason, message.to_string());
    }
}
