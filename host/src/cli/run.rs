//! `operon run`: build a manager, add controllers for module files
//! (`--module`, swapped when the file changes) and for `Reconciler`
//! resources, run until a signal.

use super::{RunArgs, load};
use crate::controller::{Controller, Notice};
use crate::manager::{self, Manager};
use crate::reconciler::{self, Plugins};
use crate::runtime::{self, Runtime};
use crate::webhook::{self, Webhooks};
use anyhow::Context;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How often module files are checked for changes.
const MODULE_POLL: Duration = Duration::from_secs(2);

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let kube_config =
        kube::Config::infer().await.context("connecting to Kubernetes (set KUBECONFIG, or run in a pod)")?;
    let client = kube::Client::try_from(kube_config.clone()).context("building the Kubernetes client")?;
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
        config.lease_duration = args.leader_elect_lease_duration;
        config.renew_deadline = args.leader_elect_renew_deadline;
        config.retry_period = args.leader_elect_retry_period;
        Some(config)
    } else {
        None
    };
    let instance = std::env::var("HOSTNAME").ok();
    let controller = crate::controller::Config {
        max_concurrent_reconciles: args.max_concurrent_reconciles.max(1),
        namespace: args.namespace.clone(),
        instance: instance.clone(),
        retry_qps: args.retry_qps,
        retry_burst: args.retry_burst,
        requeue_floor: args.requeue_floor,
        requeue_qps: args.requeue_qps,
        requeue_burst: args.requeue_burst,
        reconcile_timeout: args.reconcile_timeout,
        guest_cpu: args.guest_cpu,
        guest_cpu_burst: args.guest_cpu_burst,
        guest_cpu_max: args.max_guest_cpu,
        max_desired: args.max_children_per_outcome,
        max_events: args.max_events_per_outcome,
        ..Default::default()
    };
    let config = manager::Config {
        controller: controller.clone(),
        leader,
        lease_per_controller: args.lease_per_reconciler,
        server_addr: parse_addr(&args.metrics_bind_address)?,
        metrics_serving: args.metrics_serving(),
        probe_addr: parse_addr(&args.health_probe_bind_address)?,
        shutdown_timeout: args.graceful_shutdown_timeout,
        ..Default::default()
    };
    let mut manager = Manager::new(client.clone(), config);
    let (stop_webhooks, webhooks_stopped) = tokio::sync::oneshot::channel::<()>();
    let webhooks = match parse_addr(&args.webhook_bind_address)? {
        Some(bind) => {
            let config = webhook_config(&args, bind)?;
            let stopped = async move {
                let _ = webhooks_stopped.await;
            };
            Some(Webhooks::start(client.clone(), manager.metrics().clone(), config, stopped).await?)
        }
        None => None,
    };
    let mut watchers = tokio::task::JoinSet::new();
    // Without module files, Reconciler resources are what there is to run.
    let reconcilers = args.reconcilers || args.modules.is_empty();
    for path in &args.modules {
        let module = load(&runtime, path, limits.clone())?;
        let info = module.info();
        tracing::info!(
            controller = %info.manifest.name, digest = %info.digest, path = %path.display(),
            compile_ms = info.compile_time.as_millis() as u64, "module loaded"
        );
        let admission = module.admission();
        let controller = manager.add(module);
        match (&webhooks, admission) {
            (Some(webhooks), true) => {
                let mut plugin = webhook::Plugin::new(controller.name(), controller.clone());
                plugin.failure_policy = args.webhook_failure_policy;
                plugin.scope_namespace = args.namespace.clone();
                watchers.spawn(register_webhooks(webhooks.clone(), plugin));
            }
            (None, true) => tracing::info!(
                controller = controller.name(),
                "the module exports admission; pass --webhook-bind-address to serve it as webhooks"
            ),
            (_, false) => {}
        }
        watchers.spawn(log_notices(controller.clone()));
        watchers.spawn(watch_module(runtime.clone(), path.clone(), limits.clone(), controller));
    }
    let (stop_plugins, plugins_stopped) = tokio::sync::oneshot::channel::<()>();
    let plugins = reconcilers.then(|| {
        let plugins = Plugins::new(
            manager.clone(),
            runtime.clone(),
            reconciler::Config {
                kube_config,
                namespace: args.namespace.clone(),
                selector: args.reconciler_selector.clone(),
                require_service_account: args.require_service_account,
                allow_module_paths: args.allow_module_paths,
                controller,
                status_period: Duration::from_secs(5),
                path_poll: MODULE_POLL,
                instance: instance.unwrap_or_else(|| "operon".into()),
                webhooks: webhooks.clone(),
            },
        );
        tokio::spawn(plugins.run(async move {
            let _ = plugins_stopped.await;
        }))
    });
    let result = manager.run(shutdown_signal()).await;
    let _ = stop_plugins.send(());
    if let Some(plugins) = plugins {
        let _ = plugins.await;
    }
    watchers.abort_all();
    // A self-generated CA dies with the process: configurations that name it
    // would only make the API server call a host nobody can trust.
    if let Some(webhooks) = webhooks.filter(Webhooks::self_signed) {
        let _ = tokio::time::timeout(Duration::from_secs(5), webhooks.unregister_all()).await;
    }
    let _ = stop_webhooks.send(());
    result.map_err(Into::into)
}

/// The webhook server's settings from the flags.
fn webhook_config(args: &RunArgs, bind: SocketAddr) -> anyhow::Result<webhook::Config> {
    let endpoint = match (&args.webhook_service, &args.webhook_url_host) {
        (Some(service), _) => webhook::Endpoint::service(service).map_err(anyhow::Error::msg)?,
        (None, Some(host)) => webhook::Endpoint::url(host).map_err(anyhow::Error::msg)?,
        (None, None) => webhook::Endpoint::default(),
    };
    Ok(webhook::Config { bind, cert_dir: args.webhook_cert_dir.clone(), endpoint })
}

/// Register a plugin's webhooks, retrying while its kind is not served yet
/// (a CRD installed after start) or the API server refuses.
async fn register_webhooks(webhooks: Webhooks, plugin: webhook::Plugin) {
    let mut delay = Duration::from_secs(1);
    loop {
        match webhooks.register(plugin.clone()).await {
            Ok(()) => return,
            Err(e @ (webhook::Error::NoAdmission { .. } | webhook::Error::InvalidPlugin { .. })) => {
                tracing::error!(plugin = %plugin.name, error = %e, "admission webhooks not served");
                return;
            }
            Err(e) => {
                tracing::warn!(plugin = %plugin.name, error = %e, retry_in = ?delay, "admission webhooks not registered yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Log a standalone controller's rollbacks (Reconcilers report them in
/// their status and events).
async fn log_notices(controller: Controller) {
    let mut rx = controller.notices();
    while let Ok(notice) = rx.recv().await {
        match notice {
            Notice::RolledBack { from, to, reason } => {
                tracing::error!(controller = controller.name(), %from, %to, "new module version rolled back: {reason}")
            }
            Notice::ShadowDiffers { sample } => {
                tracing::info!(controller = controller.name(), "shadow differs: {sample}")
            }
        }
    }
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

/// The first SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn wait_signal() {
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
