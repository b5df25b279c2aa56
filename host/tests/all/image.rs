//! The operon image, as a cluster runs it: pulled back from the registry
//! `cargo xtask image` pushed it to, unpacked, and its entrypoint run as the
//! image's user on a read-only root filesystem against the test control
//! plane, reconciling a WebApp.
//!
//! `cargo xtask image` pushes into a `docker-registry` storing under
//! `target/image/registry`; this test serves that storage again on a
//! loopback port, pulls with skopeo (`docker://` → an OCI layout) and
//! unpacks with umoci (an OCI runtime bundle: `rootfs/` and `config.json`).
//! Containers cannot run here (the sandbox refuses a runtime's
//! `setrlimit`), so the bundle is run the way a runtime would, with
//! util-linux and coreutils: new mount and PID namespaces (`unshare`), the
//! rootfs bind-mounted and remounted read-only with tmpfs on `/tmp` and
//! `/cache`, `/proc`, four device nodes, the ServiceAccount volume and the
//! module read-only; then `setpriv --no-new-privs` and `chroot
//! --userspec=<config.json's uid:gid>` exec the config's `args` with its
//! `env` alone, plus the in-cluster variables a kubelet sets.
//!
//! What this proves: the pushed image pulls and unpacks with standard tools;
//! it holds the binary and CA certificates and nothing else; the binary is
//! static (there is no loader or libc to find); it runs as uid 65532 with
//! no capabilities and no new privileges, never writing its root; the
//! in-cluster configuration works from a ServiceAccount token; it reconciles.
//! What it does not: a container runtime's seccomp profile, cgroup limits,
//! its own network namespace (the process shares the host's loopback to
//! reach the API server), the kubelet's probes and pulls by a CRI.
//!
//! Fails, never skips, without `cargo xtask image`, docker-registry,
//! skopeo, umoci or util-linux.

use crate::common;

use common::{eventually, free_port, webapp_crd};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The image's repository in the loopback registry (xtask's `REPOSITORY`).
const REPOSITORY: &str = "operon-dev/operon";

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("image", || operon_envtest::Options::default().crd(webapp_crd()))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a tool, asserting success, with what to install when it is missing.
fn run(command: &mut Command, install: &str) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {command:?} ({e}): {install}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image pulled from the registry and unpacked: `(rootfs, config.json)`.
fn pull(dir: &Path) -> (PathBuf, Value) {
    let storage = repo().join("target/image/registry");
    assert!(storage.join("data").is_dir(), "{} holds no registry: run `cargo xtask image` first", storage.display());
    let registry = operon_envtest::Registry::start(&storage).expect("the registry over xtask's storage");
    let policy = dir.join("policy.json");
    std::fs::write(&policy, r#"{"default": [{"type": "insecureAcceptAnything"}]}"#).unwrap();
    let layout = dir.join("pulled");
    run(
        Command::new("skopeo")
            .arg("--policy")
            .arg(&policy)
            .args(["copy", "--src-tls-verify=false"])
            .arg(format!("docker://{}/{REPOSITORY}:{VERSION}", registry.addr()))
            .arg(format!("oci:{}:{VERSION}", layout.display())),
        "apt-get install skopeo",
    );
    drop(registry);
    let bundle = dir.join("bundle");
    run(
        Command::new("umoci").args(["unpack", "--image"]).arg(format!("{}:{VERSION}", layout.display())).arg(&bundle),
        "apt-get install umoci",
    );
    let config: Value = serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    (bundle.join("rootfs"), config)
}

/// Every file and symlink under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                walk(base, &entry.path(), out);
            } else {
                out.push(entry.path().strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The image's entrypoint running in its own mount and PID namespaces; both
/// processes are killed when dropped.
struct Contained {
    /// `unshare`, in the test's PID namespace.
    child: Child,
    log: PathBuf,
}

impl Contained {
    /// The process `unshare` forked (PID 1 of the new namespace, which
    /// became `operon` through its execs), by its host PID.
    fn init_pid(&self) -> Option<u32> {
        let pid = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        if let Some(pid) = self.init_pid() {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A ServiceAccount volume as the kubelet mounts it: a token of `account`
/// (which may do anything in `namespace` only), the API server's CA and the
/// namespace.
async fn service_account_volume(client: &kube::Client, namespace: &str, dir: &Path) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    accounts
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "operon"}})).unwrap())
        .await
        .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "operon", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "operon", "namespace": namespace}]
    }))
    .unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"));
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let token = accounts.create_token_request("operon", &PostParams::default(), &request).await.unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("token"), token.status.unwrap().token).unwrap();
    std::fs::write(dir.join("namespace"), namespace).unwrap();
    let kubeconfig: Value = serde_saphyr::from_str(plane().kubeconfig()).unwrap();
    let ca = kubeconfig["clusters"][0]["cluster"]["certificate-authority"].as_str().expect("the kubeconfig's CA file");
    std::fs::copy(ca, dir.join("ca.crt")).unwrap();
}

/// Quote for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[tokio::test]
async fn the_image_from_the_registry_runs_as_its_user_on_a_read_only_root_and_reconciles_a_webapp() {
    let dir = tempfile::tempdir().unwrap();
    let (rootfs, config) = pull(dir.path());

    // Nothing but the binary and the CA certificates.
    assert_eq!(files(&rootfs), ["etc/ssl/certs/ca-certificates.crt", "usr/local/bin/operon"], "the image's files");
    let process = &config["process"];
    let (uid, gid) = (process["user"]["uid"].as_u64().unwrap(), process["user"]["gid"].as_u64().unwrap());
    assert_eq!((uid, gid), (65532, 65532), "the image's user: {process}");
    let args: Vec<String> =
        process["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    assert_eq!(args, ["/usr/local/bin/operon", "run"], "entrypoint and command");
    let env: Vec<String> = process["env"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_owned()).collect();

    // The cluster side: a namespace, a ServiceAccount, the WebApp module.
    let client = plane().client().await;
    let namespace = operon_envtest::create_namespace(&client, "image").await.unwrap();
    let account = dir.path().join("serviceaccount");
    service_account_volume(&client, &namespace, &account).await;
    let modules = dir.path().join("modules");
    std::fs::create_dir_all(&modules).unwrap();
    std::fs::copy(common::guests_dir().join("rust-webapp.wasm"), modules.join("rust-webapp.wasm"))
        .expect("target/guests/rust-webapp.wasm: run `cargo xtask guests`");
    let (api_host, api_port) = plane().server().trim_start_matches("https://").rsplit_once(':').expect("HOST:PORT");
    let probe_port = free_port();

    // Run it as a runtime would: the mounts, then the image's user.
    let r = rootfs.display().to_string();
    let mut script = String::from("set -eu\n");
    script.push_str(&format!("R={}\n", quote(&r)));
    script.push_str(
        "for d in proc dev tmp cache modules var/run/secrets/kubernetes.io/serviceaccount; do mkdir -p \"$R/$d\"; done\n\
         mount --bind \"$R\" \"$R\"\n\
         mount -t proc proc \"$R/proc\"\n\
         mount -t tmpfs -o mode=755,size=64k tmpfs \"$R/dev\"\n\
         for n in null zero random urandom; do touch \"$R/dev/$n\"; mount --bind \"/dev/$n\" \"$R/dev/$n\"; done\n\
         mount -t tmpfs -o mode=1777,size=64m tmpfs \"$R/tmp\"\n\
         mount -t tmpfs -o mode=1777,size=256m tmpfs \"$R/cache\"\n",
    );
    for (from, to) in [(&account, "var/run/secrets/kubernetes.io/serviceaccount"), (&modules, "modules")] {
        script.push_str(&format!(
            "mount --bind {from} \"$R/{to}\"\nmount -o remount,bind,ro \"$R/{to}\"\n",
            from = quote(&from.display().to_string())
        ));
    }
    script.push_str("mount -o remount,bind,ro \"$R\"\n");
    let mut exec = vec!["exec".to_string(), "env".into(), "-i".into()];
    exec.extend(env.iter().map(|e| quote(e)));
    for pod_env in [
        format!("KUBERNETES_SERVICE_HOST={api_host}"),
        format!("KUBERNETES_SERVICE_PORT={api_port}"),
        "XDG_CACHE_HOME=/cache".into(),
        "HOSTNAME=operon-image-test".into(),
        "RUST_LOG=info".into(),
    ] {
        exec.push(quote(&pod_env));
    }
    exec.extend(["setpriv".into(), "--no-new-privs".into(), "chroot".into()]);
    exec.push(format!("--userspec={uid}:{gid}"));
    exec.push(format!("--groups={gid}"));
    exec.push("\"$R\"".into());
    exec.extend(args.iter().map(|a| quote(a)));
    for flag in [
        "--module=/modules/rust-webapp.wasm".to_string(),
        format!("--namespace={namespace}"),
        "--metrics-bind-address=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
    ] {
        exec.push(quote(&flag));
    }
    script.push_str(&exec.join(" "));
    script.push('\n');
    let log = dir.path().join("operon.log");
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--propagation", "private", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("unshare (util-linux) runs the image's entrypoint");
    let mut contained = Contained { child, log };

    // It serves its probes, as its user, on a read-only root.
    let healthz = format!("http://127.0.0.1:{probe_port}/healthz");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !common::http_get(&healthz).await.is_ok_and(|r| r.status().is_success()) {
        if let Some(status) = contained.child.try_wait().unwrap() {
            panic!(
                "the contained entrypoint exited ({status}); unshare needs root (CAP_SYS_ADMIN):\n{}",
                contained.log()
            );
        }
        assert!(std::time::Instant::now() < deadline, "no /healthz within 60 s:\n{}", contained.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pid = contained.init_pid().expect("the contained process");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = |key: &str| status.lines().find(|l| l.starts_with(key)).unwrap_or_default().to_string();
    assert!(line("Uid:").split_whitespace().skip(1).all(|id| id == "65532"), "{}", line("Uid:"));
    assert!(line("Gid:").split_whitespace().skip(1).all(|id| id == "65532"), "{}", line("Gid:"));
    assert_eq!(line("CapEff:").split_whitespace().nth(1), Some("0000000000000000"), "no capabilities");
    assert_eq!(line("NoNewPrivs:").split_whitespace().nth(1), Some("1"));
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.ends_with("usr/local/bin/operon"), "{}", exe.display());
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mounts.lines().find(|l| l.split_whitespace().nth(4) == Some("/")).expect("the root mount");
    assert!(
        root.split_whitespace().nth(5).is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "root is not read-only: {root}"
    );

    // And it reconciles: a WebApp becomes a Deployment.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
    let webapps: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ar);
    let webapp = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop"}, "spec": {"image": "nginx:1.27", "replicas": 2}
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &webapp).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let deployment = eventually("the WebApp's Deployment", Duration::from_secs(60), || async {
        deployments.get_opt("shop").await.ok().flatten()
    })
    .await;
    assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(2));
    assert!(!contained.log().contains("Read-only file system"), "{}", contained.log());
    eprintln!("the image ran as 65532 on a read-only root and reconciled; its log:\n{}", contained.log());
}
