//! `operon dev --once`, the README's main job, end to end: the real binary
//! starts a local control plane (kube-apiserver, scheduler, controllers,
//! kwok nodes), builds the Rust and the Python WebApp guests with their
//! toolchains, loads them as Reconcilers and waits until every sample
//! WebApp is Ready — which needs its Deployment to become Available on the
//! fake nodes. Nothing is skipped: a missing toolchain or binary fails.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[test]
fn operon_dev_once_brings_every_sample_webapp_to_ready() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository root");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_operon"))
        .current_dir(root)
        .args([
            "dev",
            "--once",
            "--timeout",
            "5m",
            // Port 0: tests run beside other processes that may hold 8080.
            "--metrics-bind-address",
            "127.0.0.1:0",
            "guest-examples/rust-webapp",
            "guest-examples/python-webapp",
        ])
        .output()
        .expect("running operon dev");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("operon dev --once took {:.1}s", started.elapsed().as_secs_f64());
    assert!(output.status.success(), "operon dev failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);

    // Both projects were built and none skipped (a missing toolchain fails).
    assert!(!stdout.contains("skipped "), "a project was skipped:\n{stdout}");
    let ready = stdout.lines().find(|l| l.starts_with("ready: ")).unwrap_or_else(|| panic!("no verdict:\n{stdout}"));
    for name in ["dev-rust-webapp/rust-webapp", "dev-python-webapp/python-webapp"] {
        assert!(ready.contains(name), "{name} missing from {ready:?}");
        assert!(
            stdout.lines().any(|l| l.starts_with(name) && l.split_whitespace().nth(1) == Some("True")),
            "no Ready row for Reconciler {name}:\n{stdout}"
        );
    }
    for ns in ["dev-rust-webapp", "dev-python-webapp"] {
        for parent in ["shop", "blog"] {
            let name = format!("{ns}/{parent}");
            assert!(ready.contains(&name), "{name} missing from {ready:?}");
            // The last table printed shows it Ready with children.
            let row = stdout
                .lines()
                .rev()
                .find(|l| l.split_whitespace().next() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"));
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols.get(1), Some(&"True"), "{name} not Ready in {row:?}");
            let children: usize = cols.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
            assert!(children >= 2, "{name} has {children} children in {row:?}");
        }
    }
}
