//! `cargo xtask run`: the main job on one machine. Starts the local control
//! plane (`cluster up`), builds the example guests, installs their CRDs and
//! example objects, then runs `operon run` in the foreground with every
//! example module until Ctrl-C. The control plane keeps running afterwards
//! (`cargo xtask cluster down` stops it).

use anyhow::{Context, Result, bail};
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde::Deserialize as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXAMPLES: &[&str] = &["rust-webapp"];

pub fn run(args: &[&str]) -> Result<()> {
    let extra: Vec<String> = match args {
        [] => Vec::new(),
        ["--", rest @ ..] => rest.iter().map(|s| s.to_string()).collect(),
        _ => bail!("usage: cargo xtask run [-- OPERON-RUN-FLAGS…]"),
    };
    let root = crate::root();
    crate::cluster::run(&["up"])?;
    crate::guests::run(EXAMPLES)?;
    let kubeconfig = root.join("target/operon-dev.kubeconfig");

    // The WebApp's CRD and samples are shared by every language's example.
    let files: Vec<PathBuf> = ["crd.yaml", "example.yaml"].map(|f| root.join("guest-examples/webapp").join(f)).to_vec();
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(apply_files(&kubeconfig, &files))?;

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut operon = Command::new(cargo);
    operon.current_dir(&root).args([
        "run",
        "--quiet",
        "-p",
        "operon",
        "--",
        "run",
        "--metrics-bind-address",
        "127.0.0.1:8080",
    ]);
    for e in EXAMPLES {
        operon.arg("--module").arg(root.join("target/guests").join(format!("{e}.wasm")));
    }
    operon.args(&extra).env("KUBECONFIG", &kubeconfig);
    eprintln!(
        "run: starting operon; metrics on http://127.0.0.1:8080/metrics\n\
         run: in another terminal: KUBECONFIG={} kubectl get webapps,deployments,services -A\n\
         run: Ctrl-C stops operon; `cargo xtask cluster down` stops the control plane",
        kubeconfig.display()
    );
    let status = operon.status().context("running operon")?;
    if !status.success() {
        bail!("operon exited with {status}");
    }
    Ok(())
}

/// Server-side apply every object of the YAML files, CRDs first (and wait
/// until the API server serves them).
async fn apply_files(kubeconfig: &Path, files: &[PathBuf]) -> Result<()> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;
    let mut objects: Vec<DynamicObject> = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(doc)?;
            if !value.is_null() {
                objects
                    .push(serde_yaml::from_value(value).with_context(|| format!("an object in {}", file.display()))?);
            }
        }
    }
    objects.sort_by_key(|o| o.types.as_ref().map(|t| t.kind != "CustomResourceDefinition"));
    let params = PatchParams::apply("operon-xtask").force();
    for obj in &objects {
        let types = obj.types.clone().context("an object without apiVersion/kind")?;
        let (group, version) = types.api_version.rsplit_once('/').unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let name = obj.metadata.name.clone().context("an object without a name")?;
        // Discovery right after a CRD is installed can lag: retry briefly.
        let mut tries = 0;
        let (ar, caps) = loop {
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok(found) => break found,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("{} is not served", types.kind)),
            }
        };
        let api: kube::Api<DynamicObject> = match (&obj.metadata.namespace, caps.scope) {
            (Some(ns), kube::discovery::Scope::Namespaced) => kube::Api::namespaced_with(client.clone(), ns, &ar),
            _ => kube::Api::all_with(client.clone(), &ar),
        };
        api.patch(&name, &params, &Patch::Apply(obj))
            .await
            .with_context(|| format!("applying {} {name}", types.kind))?;
        eprintln!("run: applied {} {name}", types.kind);
    }
    Ok(())
}
