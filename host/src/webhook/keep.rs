//! Keeping the configurations of the plugins this replica leads in place:
//! re-applied when missing or changed by anyone else, so a replica that
//! shut down (or an administrator) never silently turns admission off.

use super::*;

impl Webhooks {
    /// Keep the configurations of every plugin this replica leads in
    /// place until `stop`: re-applied when one is missing or was changed by
    /// someone else (a replica that shut down, an administrator, a
    /// leadership that just moved here), checked on every change of a
    /// configuration, when a plugin's leadership changes, and every 30 s.
    pub async fn keep_configured(self, cache: Cache, stop: impl Future<Output = ()>) {
        let labelled = |kind: &str| {
            let mut key = WatchKey::new(Gvk::new("admissionregistration.k8s.io", "v1", kind), None);
            key.selector = Some(config::PLUGIN_LABEL.to_string());
            cache.informer(key)
        };
        let informers = [labelled("ValidatingWebhookConfiguration"), labelled("MutatingWebhookConfiguration")];
        let mut events: Vec<_> = informers.iter().map(|i| i.subscribe()).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for mut rx in events.drain(..) {
            let this = self.clone();
            tasks.spawn(async move {
                while let Some(ev) = rx.recv().await {
                    if let ObjectEvent::Applied { initial: false, .. } | ObjectEvent::Deleted(_) = ev {
                        this.shared.recheck.notify_one();
                    }
                }
            });
        }
        tokio::pin!(stop);
        let mut leading: HashMap<String, bool> = HashMap::new();
        let mut checked = tokio::time::Instant::now();
        loop {
            let notified = tokio::select! {
                () = &mut stop => break,
                () = self.shared.recheck.notified() => true,
                // Leadership moves are noticed within a second.
                () = tokio::time::sleep(Duration::from_secs(1)) => false,
            };
            let routes: Vec<(String, Arc<Route>)> = self.routes().iter().map(|(n, r)| (n.clone(), r.clone())).collect();
            let now: HashMap<String, bool> =
                routes.iter().map(|(n, r)| (n.clone(), r.registration.leadership.is_leading())).collect();
            let due = notified || now != leading || checked.elapsed() >= RECHECK;
            leading = now;
            if !due || !informers.iter().all(|i| i.is_synced()) {
                continue;
            }
            checked = tokio::time::Instant::now();
            for (name, route) in routes {
                if !route.configured || !route.registration.leadership.is_leading() {
                    continue;
                }
                let ca = self.ca_bundle();
                let expected = config::expected_hash(
                    &route.registration.settings(),
                    &route.kind,
                    &route.plural,
                    route.namespaced,
                    &self.target(ca.as_ref().map(|c| c.as_slice())),
                );
                let current = informers.iter().all(|i| {
                    i.store()
                        .get(&crate::cache::ObjectKey::new(None, &config::name(&name)))
                        .is_some_and(|o| o.annotation(config::APPLIED_ANNOTATION).as_deref() == Some(expected.as_str()))
                });
                if current {
                    continue;
                }
                let _writing = self.shared.writing.lock().await;
                // Unregistered (or registered anew) meanwhile: not ours to apply.
                if !self.route(&name).is_some_and(|r| Arc::ptr_eq(&r, &route)) {
                    continue;
                }
                match self.apply(&route).await {
                    Ok(()) => {
                        tracing::info!(plugin = %name, "webhook configurations applied (they were missing or changed)")
                    }
                    Err(e @ Error::NotLeading { .. }) => {
                        tracing::debug!(plugin = %name, error = %e, "leadership moved before the configurations were applied")
                    }
                    Err(e) => tracing::warn!(plugin = %name, error = %e, "could not apply the webhook configurations"),
                }
            }
        }
        tasks.abort_all();
    }

    /// Where the configurations point, trusting `ca_bundle` (the current
    /// one, [`Webhooks::ca_bundle`]).
    pub(super) fn target<'a>(&'a self, ca_bundle: Option<&'a [u8]>) -> config::Target<'a> {
        config::Target { endpoint: &self.shared.endpoint, bound_port: self.shared.local_addr.port(), ca_bundle }
    }
}
