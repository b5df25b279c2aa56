//! `operon run`: the flags, turned into one [`Manager`] built through its
//! builder (module files and Reconciler resources alike go through the
//! Reconciler lifecycle), run until a signal.

use super::RunArgs;
use crate::manager::{self, Manager};
use crate::reconciler::{self, ModuleFile, Reconcilers};
use crate::runtime::{self, Runtime};
use crate::{pipeline, webhook};
use anyhow::Context;
use std::net::SocketAddr;
use std::time::Duration;

/// How often module files are checked for changes.
const MODULE_POLL: Duration = Duration::from_secs(2);

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let kube_config =
        kube::Config::infer().await.context("connecting to Kubernetes (set KUBECONFIG, or run in a pod)")?;
    let client = kube::Client::try_from(kube_config.clone()).context("building the Kubernetes client")?;
    let gate = runtime::GateLimits {
        memory: if args.max_guest_memory_total == 0 { u64::MAX } else { args.max_guest_memory_total },
        calls: if args.max_guest_calls == 0 { usize::MAX } else { args.max_guest_calls },
    };
    let unload_idle_after = (!args.unload_idle_after.is_zero()).then_some(args.unload_idle_after);
    let runtime = Runtime::new(runtime::Config {
        max_memory: args.max_guest_memory_mib << 20,
        gate,
        unload_idle_after,
        artifact_cache_max: args.artifact_cache_max_size,
        ..Default::default()
    })?;
    let mut builder = Manager::builder(client).config(manager_config(&args)?).runtime(runtime);
    let webhooks = parse_addr(&args.webhook_bind_address)?;
    if let Some(bind) = webhooks {
        builder = builder.webhooks(webhook_config(&args, bind)?);
    }
    let limits = args.limits.limits();
    let files = args
        .modules
        .iter()
        .map(|path| ModuleFile {
            path: path.clone(),
            limits: limits.clone(),
            // A module that exports validate/mutate is served as webhooks
            // where this host serves any.
            admission: webhooks.map(|_| args.webhook_failure_policy),
            namespace: args.namespace.clone(),
        })
        .collect();
    // Without module files, Reconciler resources are what there is to run.
    let resources = args.reconcilers || args.modules.is_empty();
    let module_trust = if args.require_signed_modules {
        reconciler::verify::HostPolicy::require(&args.trusted_module_keys)?
    } else {
        reconciler::verify::HostPolicy::default()
    };
    let config = reconciler::Config {
        kube_config: Some(kube_config),
        resources,
        namespace: args.namespace.clone(),
        selector: args.reconciler_selector.clone(),
        require_service_account: args.require_service_account,
        allow_module_paths: args.allow_module_paths,
        status_period: Duration::from_secs(5),
        path_poll: MODULE_POLL,
        instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "operon".into()),
        bounds: reconciler::source::Bounds {
            max_bytes: usize::try_from(args.max_module_size).unwrap_or(usize::MAX),
            timeout: args.module_fetch_timeout,
        },
        max_output: args.max_guest_output,
        module_trust,
    };
    let manager = builder.add(Reconcilers::component(config, files)).build().await?;
    manager.run(shutdown_signal()).await.map_err(Into::into)
}

/// The manager's settings from the flags.
fn manager_config(args: &RunArgs) -> anyhow::Result<manager::Config> {
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
    let pipeline = pipeline::Config {
        controller: crate::controller::Config {
            max_concurrent_reconciles: args.max_concurrent_reconciles.max(1),
            retry_qps: args.retry_qps,
            retry_burst: args.retry_burst,
            requeue_qps: args.requeue_qps,
            requeue_burst: args.requeue_burst,
            reconcile_timeout: args.reconcile_timeout,
            ..Default::default()
        },
        namespace: args.namespace.clone(),
        instance: std::env::var("HOSTNAME").ok(),
        requeue_floor: args.requeue_floor,
        guest_cpu: args.guest_cpu,
        guest_cpu_burst: args.guest_cpu_burst,
        guest_cpu_max: args.max_guest_cpu,
        // The host's own budget: a burst of a few calls' worth, like a
        // controller's.
        host_cpu: pipeline::Budget::new(args.max_guest_cpu_total, args.guest_cpu_burst, args.limits.guest_timeout)
            .map(std::sync::Arc::new),
        max_desired: args.max_children_per_outcome,
        max_events: args.max_events_per_outcome,
        event_qps: args.event_qps,
        event_burst: args.event_burst,
        egress_allowed: crate::egress::grants::Allowed::parse(&args.egress_allow)
            .map_err(|e| anyhow::anyhow!("--egress-allow: {e}"))?
            .with_cluster(&args.cluster_cidrs),
        record: args.record.recorder()?,
        ..Default::default()
    };
    Ok(manager::Config {
        pipeline,
        leader,
        lease_per_controller: args.lease_per_reconciler,
        server_addr: parse_addr(&args.metrics_bind_address)?,
        metrics_serving: args.metrics_serving(),
        probe_addr: parse_addr(&args.health_probe_bind_address)?,
        shutdown_timeout: args.graceful_shutdown_timeout,
        ..Default::default()
    })
}

/// The webhook server's settings from the flags.
fn webhook_config(args: &RunArgs, bind: SocketAddr) -> anyhow::Result<webhook::Config> {
    let endpoint = match (&args.webhook_service, &args.webhook_url_host) {
        (Some(service), _) => webhook::Endpoint::service(service)?,
        (None, Some(host)) => webhook::Endpoint::url(host)?,
        (None, None) => webhook::Endpoint::default(),
    };
    Ok(webhook::Config {
        bind,
        cert_dir: args.webhook_cert_dir.clone(),
        client_ca: args.webhook_client_ca_file.clone(),
        endpoint,
        max_concurrent: args.webhook_max_concurrent.max(1),
        max_concurrent_per_plugin: args.webhook_max_concurrent_per_plugin.max(1),
        conversion_allowed: webhook::ConversionAllowed::parse(&args.conversion_allow)?,
        limits: crate::server::Limits {
            max_connections: args.webhook_max_connections.max(1),
            max_connections_per_client: args.webhook_max_connections_per_client.max(1),
            ..crate::server::Limits::WEBHOOKS
        },
        shutdown_grace: args.webhook_shutdown_grace,
    })
}

/// `host:port`, `:port`, or `0` for "do not serve".
pub(crate) fn parse_addr(text: &str) -> anyhow::Result<Option<SocketAddr>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        args: RunArgs,
    }

    /// `operon run` with no flags runs as the library does by default: a
    /// default changed in one place and not the other fails here.
    #[test]
    fn the_flags_defaults_should_be_the_librarys() {
        let args = Run::parse_from(["operon"]).args;
        let built = manager_config(&args).unwrap();
        let (ours, library) = (&built.pipeline, pipeline::Config::default());
        let (c, lc) = (&ours.controller, &library.controller);
        assert_eq!(c.max_concurrent_reconciles, lc.max_concurrent_reconciles, "--max-concurrent-reconciles");
        assert_eq!(c.retry_qps, lc.retry_qps, "--retry-qps");
        assert_eq!(c.retry_burst, lc.retry_burst, "--retry-burst");
        assert_eq!(c.requeue_qps, lc.requeue_qps, "--requeue-qps");
        assert_eq!(c.requeue_burst, lc.requeue_burst, "--requeue-burst");
        assert_eq!(c.reconcile_timeout, lc.reconcile_timeout, "--reconcile-timeout");
        assert_eq!(ours.requeue_floor, library.requeue_floor, "--requeue-floor");
        assert_eq!(ours.guest_cpu, library.guest_cpu, "--guest-cpu");
        assert_eq!(ours.guest_cpu_burst, library.guest_cpu_burst, "--guest-cpu-burst");
        assert_eq!(ours.guest_cpu_max, library.guest_cpu_max, "--max-guest-cpu");
        assert_eq!(ours.max_desired, library.max_desired, "--max-children-per-outcome");
        assert_eq!(ours.max_events, library.max_events, "--max-events-per-outcome");
        assert_eq!(ours.event_qps, library.event_qps, "--event-qps");
        assert_eq!(ours.event_burst, library.event_burst, "--event-burst");
        assert_eq!(built.shutdown_timeout, manager::Config::default().shutdown_timeout, "--graceful-shutdown-timeout");

        let leader = crate::leader::Config::new("ns", "id");
        assert_eq!(args.leader_elect_lease_duration, leader.lease_duration, "--leader-elect-lease-duration");
        assert_eq!(args.leader_elect_renew_deadline, leader.renew_deadline, "--leader-elect-renew-deadline");
        assert_eq!(args.leader_elect_retry_period, leader.retry_period, "--leader-elect-retry-period");

        let runtime = runtime::Config::default();
        assert_eq!(args.max_guest_memory_mib << 20, runtime.max_memory as u64, "--max-guest-memory-mib");
        assert_eq!(args.artifact_cache_max_size, runtime.artifact_cache_max, "--artifact-cache-max-size");

        let webhooks = webhook_config(&args, "127.0.0.1:9443".parse().unwrap()).unwrap();
        let library = webhook::Config::default();
        assert_eq!(webhooks.max_concurrent, library.max_concurrent, "--webhook-max-concurrent");
        assert_eq!(webhooks.max_concurrent_per_plugin, library.max_concurrent_per_plugin);
        assert_eq!(webhooks.shutdown_grace, library.shutdown_grace, "--webhook-shutdown-grace");
        assert_eq!(webhooks.limits.max_connections, library.limits.max_connections, "--webhook-max-connections");
        assert_eq!(webhooks.limits.max_connections_per_client, library.limits.max_connections_per_client);
    }
}
