//! Running what the manager holds: each runnable while its unit leads,
//! and the readiness it reports.

use super::*;

/// Run one runnable whenever this replica leads its unit, until `stop`.
pub(super) async fn supervise(runnable: Arc<dyn Runnable>, leadership: Leadership, mut stop: watch::Receiver<bool>) {
    let name = runnable.name().to_string();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = leadership.wait_leading() => {}
        }
        let fence = leadership.fence();
        wait_synced(&*runnable, &mut stop).await;
        if *stop.borrow() {
            return;
        }
        tracing::info!(controller = %name, lease = %leadership.lease(), "leading: running");
        let mut stop_run = stop.clone();
        let closed = fence.clone();
        runnable
            .run(
                Box::pin(async move {
                    tokio::select! {
                        _ = stop_run.wait_for(|s| *s) => {}
                        () = closed.closed() => {}
                    }
                }),
                fence,
            )
            .await;
        if *stop.borrow() {
            return;
        }
        tracing::warn!(controller = %name, lease = %leadership.lease(), "lost the lease; standing by");
    }
}

/// Wait for a runnable's informers, logging (not failing) while a kind is
/// missing: its CRD may be installed later.
pub(super) async fn wait_synced(r: &dyn Runnable, stop: &mut watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            result = r.wait_synced(Duration::from_secs(30)) => match result {
                Ok(()) => return,
                Err(e) => tracing::warn!(controller = r.name(), error = %e, "still waiting for the cache"),
            }
        }
    }
}

/// Keep each component's readiness on `/readyz` until it is ready.
pub(super) async fn report_parts(parts: Vec<Arc<dyn Part>>, readiness: Readiness) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let mut all = true;
        for part in &parts {
            let why = part.not_ready();
            all &= why.is_none();
            readiness.set(part.name(), why);
        }
        if all {
            return;
        }
    }
}

/// Keep `/readyz` and the cache gauges current.
pub(super) async fn report_readiness(cache: Cache, metrics: Arc<Metrics>, readiness: Readiness) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let mut unsynced = Vec::new();
        for informer in cache.informers() {
            let key = informer.key();
            metrics.cache_objects(&key.kind.to_string(), informer.store().len());
            if !informer.is_synced() {
                unsynced.push(match informer.last_error() {
                    Some(e) => format!("{key} ({e})"),
                    None => key.to_string(),
                });
            }
        }
        readiness.set("cache", (!unsynced.is_empty()).then(|| format!("not synced: {}", unsynced.join("; "))));
    }
}
