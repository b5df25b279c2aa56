//! `operon run`: load modules from files, build a manager, run until a
//! signal; swap a module when its file changes.

use super::{RunArgs, load};
use crate::controller::Controller;
use crate::manager::{self, Manager};
use crate::runtime::{self, Runtime};
use anyhow::Context;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How often module files are checked for changes.
const MODULE_POLL: Duration = Duration::from_secs(2);

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client =
        kube::Client::try_default().await.context("connecting to Kubernetes (set KUBECONFIG, or run in a pod)")?;
    let runtime = Runtime::new(runtime::Config { max_memory: args.max_guest_memory_mib << 20, ..Default::default() })?;
    let limits = args.limits.limits();

    let leader = if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| args.namespace.clone())
            .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
            .unwrap_or_else(|| "default".into());
        let mut config = crate::leader::Config::new(namespace.trim(), args.leader_election_id.clone());
        config.lease_duration = Duration::from_secs(args.lease_duration_secs);
        config.renew_deadline = Duration::from_millis(args.renew_deadline_ms);
        config.retry_period = Duration::from_millis(args.retry_period_ms);
        Some(config)
    } else {
        None
    };
    let config = manager::Config {
        controller: crate::controller::Config {
            max_concurrent_reconciles: args.max_concurrent_reconciles.max(1),
            namespace: args.namespace.clone(),
            instance: std::env::var("HOSTNAME").ok(),
            ..Default::default()
        },
        leader,
        server_addr: parse_addr(&args.metrics_bind_address)?,
        probe_addr: args.health_probe_bind_address.as_deref().map(parse_addr).transpose()?.flatten(),
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_secs),
        ..Default::default()
    };
    let mut manager = Manager::new(client, config);
    let mut watchers = tokio::task::JoinSet::new();
    for path in &args.modules {
        let module = load(&runtime, path, limits.clone())?;
        let info = module.info();
        tracing::info!(
            controller = %info.manifest.name, digest = %info.digest, path = %path.display(),
            compile_ms = info.compile_time.as_millis() as u64, "module loaded"
        );
        let controller = manager.add(module);
        watchers.spawn(watch_module(runtime.clone(), path.clone(), limits.clone(), controller));
    }
    let result = manager.run(shutdown_signal()).await;
    watchers.abort_all();
    result.map_err(Into::into)
}

/// `host:port`, or `0` for "do not serve".
fn parse_addr(text: &str) -> anyhow::Result<Option<SocketAddr>> {
    if text == "0" {
        return Ok(None);
    }
    let addr = text.strip_prefix(':').map(|port| format!("0.0.0.0:{port}")).unwrap_or_else(|| text.to_string());
    Ok(Some(addr.parse().with_context(|| format!("bad bind address {text:?}"))?))
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once.
async fn shutdown_signal() {
    wait_signal().await;
    tracing::info!("signal received: shutting down (send another to exit at once)");
    tokio::spawn(async {
        wait_signal().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn wait_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Poll a module file; when its content changes, load the new version and
/// swap it in. A version that fails to load is logged and the old one keeps
/// running.
async fn watch_module(runtime: Runtime, path: PathBuf, limits: runtime::Limits, controller: Controller) {
    let mut current = controller.module().info().digest.clone();
    loop {
        tokio::time::sleep(MODULE_POLL).await;
        let Ok(bytes) = tokio::fs::read(&path).await else { continue };
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        if digest == current {
            continue;
        }
        current = digest.clone();
        let (runtime, limits) = (runtime.clone(), limits.clone());
        let loaded = tokio::task::spawn_blocking(move || runtime.load(&bytes, limits)).await;
        match loaded {
            Ok(Ok(module)) => match controller.swap_module(module) {
                Ok(()) => tracing::info!(controller = controller.name(), %digest, "module swapped"),
                Err(e) => tracing::error!(controller = controller.name(), %digest, error = %e, "module not swapped"),
            },
            Ok(Err(e)) => {
                tracing::error!(controller = controller.name(), %digest, error = %e, "new module version refused; keeping the running one")
            }
            Err(e) => {
                tracing::error!(controller = controller.name(), error = %e, "loading the new module version panicked")
            }
        }
    }
}
