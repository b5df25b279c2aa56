//! `operon-envtest serve`: a control plane for local development, running
//! until SIGTERM or Ctrl-C. `cargo xtask cluster up` runs it detached.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::ResourceExt;
use operon_envtest::{ControlPlane, Options};
use std::path::PathBuf;
use std::time::Instant;

const USAGE: &str = "\
usage: operon-envtest serve --state-dir DIR [--no-controller-manager] [--workloads [--nodes N]]

Starts etcd, kube-apiserver and kube-controller-manager (garbage collector and
namespace controllers only) on loopback ports and runs until SIGTERM or Ctrl-C.
With --workloads, also the deployment and replicaset controllers,
kube-scheduler and kwok with N fake Nodes (3 by default), so Deployments
become Available. DIR receives the certificates, etcd data, logs and
`kubeconfig`; `ready` appears there once the API server answers. Every start is
a fresh, empty cluster.
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut options = Options::with_controller_manager();
    match args.as_slice() {
        ["serve", "--state-dir", dir, rest @ ..] => {
            options.dir = Some(std::path::absolute(dir)?);
            let mut rest = rest.iter();
            while let Some(&flag) = rest.next() {
                match flag {
                    "--no-controller-manager" => options.controller_manager = false,
                    "--workloads" => options.workloads = true,
                    "--nodes" => {
                        let count = rest.next().with_context(|| format!("--nodes needs a number\n\n{USAGE}"))?;
                        options.nodes = count.parse().with_context(|| format!("--nodes {count}: not a number"))?;
                    }
                    _ => bail!("unexpected argument {flag:?}\n\n{USAGE}"),
                }
            }
            if options.workloads && !options.controller_manager {
                bail!("--workloads needs the controller manager; drop --no-controller-manager\n\n{USAGE}");
            }
        }
        ["help" | "--help" | "-h"] => {
            print!("{USAGE}");
            return Ok(());
        }
        _ => bail!("unexpected arguments {args:?}\n\n{USAGE}"),
    }
    serve(options)
}

fn serve(options: Options) -> Result<()> {
    let dir: PathBuf = options.dir.clone().expect("serve always has a state directory");
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);

    let started = Instant::now();
    let plane = ControlPlane::start(options)?;
    let ready_in = started.elapsed();

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        // Prove the cluster answers before saying it is ready.
        let namespaces = kube::Api::<Namespace>::all(plane.client().await)
            .list(&Default::default())
            .await
            .context("listing namespaces on the fresh cluster")?;
        let names: Vec<String> = namespaces.items.iter().map(ResourceExt::name_any).collect();
        let nodes = kube::Api::<Node>::all(plane.client().await)
            .list(&Default::default())
            .await
            .context("listing nodes on the fresh cluster")?;
        let nodes: Vec<String> = nodes.items.iter().map(ResourceExt::name_any).collect();
        println!(
            "operon-envtest: ready in {ready_in:.2?} at {} (pids {:?}); namespaces: {}; nodes: {}",
            plane.server(),
            plane.pids(),
            names.join(", "),
            if nodes.is_empty() { "none".to_owned() } else { nodes.join(", ") }
        );
        std::fs::write(&ready, format!("{}\n", plane.server()))
            .with_context(|| format!("could not write {}", ready.display()))?;

        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = terminate.recv() => println!("operon-envtest: SIGTERM, stopping"),
            _ = tokio::signal::ctrl_c() => println!("operon-envtest: interrupted, stopping"),
        }
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(&ready);
    drop(plane);
    println!("operon-envtest: stopped");
    Ok(())
}
