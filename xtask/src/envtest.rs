//! `cargo xtask envtest`: provision the control-plane binaries for
//! operon-envtest (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok, built with Go the first time) and print their
//! directory, for `KUBEBUILDER_ASSETS` or a look inside.

use anyhow::{Result, bail};
use operon_envtest::assets;
use std::time::Instant;

pub fn run(args: &[&str]) -> Result<()> {
    if !args.is_empty() {
        bail!("usage: cargo xtask envtest   (takes no arguments)");
    }
    let started = Instant::now();
    let dir = assets::ensure(&mut |line| eprintln!("envtest: {line}"))?;
    eprintln!(
        "envtest: Kubernetes {}, etcd {} and kwok {} ready in {:.1?}",
        assets::KUBERNETES_VERSION,
        assets::ETCD_VERSION,
        assets::KWOK_VERSION,
        started.elapsed()
    );
    println!("{}", dir.display());
    Ok(())
}
