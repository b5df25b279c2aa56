//! `operon dev --once`, the README's main job, end to end: the real binary
//! starts a local control plane (kube-apiserver, scheduler, controllers,
//! kwok nodes), builds the Rust and the Python WebApp guests with their
//! toolchains, loads them as Reconcilers and waits until every sample
//! WebApp is Ready — which needs its Deployment to become Available on the
//! fake nodes. Nothing is skipped: a missing toolchain or binary fails.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

/// One control plane (no workloads: a Greeting owns a ConfigMap only) for
/// the tests that point `operon dev` at it with --kubeconfig.
fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("dev", operon_envtest::Options::default)
}

/// `operon new --lang c NAME` in a scratch directory (C builds in seconds).
fn new_c_project(scratch: &Path, name: &str) -> std::path::PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_operon"))
        .current_dir(scratch)
        .args(["new", "--lang", "c", name])
        .output()
        .expect("running operon new");
    assert!(out.status.success(), "operon new failed: {}", String::from_utf8_lossy(&out.stderr));
    scratch.join(name)
}

/// `operon dev --once` on `project` against the shared control plane.
fn dev_once(project: &Path, timeout: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["dev", "--once", "--timeout", timeout, "--metrics-bind-address", "127.0.0.1:0", "--kubeconfig"])
        .arg(plane().kubeconfig_path())
        .arg(project)
        .output()
        .expect("running operon dev")
}

#[test]
fn operon_dev_once_should_refuse_a_project_whose_fixture_fails_naming_it_and_load_nothing_of_it() {
    let scratch = tempfile::tempdir().unwrap();
    let project = new_c_project(scratch.path(), "gate");
    let expected = project.join("fixtures/create.expected.yaml");
    let text = std::fs::read_to_string(&expected).unwrap();
    std::fs::write(&expected, text.replace("message: Hello from Operon", "message: Hello from elsewhere")).unwrap();

    let out = dev_once(&project, "60");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a failing fixture must fail --once:\n{stdout}");
    assert!(stdout.contains("✗ gate: fixtures failed: create; not loaded until they pass"), "{stdout}");
    assert!(stdout.contains("nothing loaded:\n  gate: fixtures failed: create"), "{stdout}");
    assert!(stdout.contains("-    message: Hello from elsewhere"), "the diff is shown:\n{stdout}");

    // Nothing of it reached the cluster: no namespace, no Reconciler.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = plane().client().await;
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        assert!(namespaces.get_opt("dev-gate").await.unwrap().is_none(), "its namespace was created");
    });
}

#[test]
fn operon_dev_should_name_a_parent_created_outside_the_reconcilers_namespace() {
    let scratch = tempfile::tempdir().unwrap();
    let project = new_c_project(scratch.path(), "stray");
    // An author's Greeting applied without -n: it lands in `default`.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use kube::api::{Api, DynamicObject, Patch, PatchParams};
        let client = plane().client().await;
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&std::fs::read_to_string(project.join("crd.yaml")).unwrap()).unwrap();
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(client.clone());
        crds.patch("greetings.demo.operon.dev", &PatchParams::apply("test").force(), &Patch::Apply(&crd))
            .await
            .unwrap();
        let gvk = kube::api::GroupVersionKind::gvk("demo.operon.dev", "v1alpha1", "Greeting");
        let mut tries = 0;
        let ar = loop {
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok((ar, _)) => break ar,
                Err(_) if tries < 100 => tries += 1,
                Err(e) => panic!("Greeting is not served: {e}"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        let greetings: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
        let stray: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.operon.dev/v1alpha1", "kind": "Greeting",
            "metadata": {"name": "lost"}, "spec": {"message": "hi"}
        }))
        .unwrap();
        greetings.patch("lost", &PatchParams::apply("test"), &Patch::Apply(&stray)).await.unwrap();
    });

    let out = dev_once(&project, "120");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "operon dev failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "⚠ Greeting default/lost is in namespace default, where no Reconciler acts: \
             the stray Reconciler acts in dev-stray only; apply it there (kubectl apply -n dev-stray -f …)"
        ),
        "{stdout}"
    );
    // The hint names the kinds loaded, not WebApps.
    let hint = stdout.lines().find(|l| l.contains("kubectl get ")).unwrap_or_else(|| panic!("no hint:\n{stdout}"));
    assert!(
        hint.contains("greetings.demo.operon.dev") && hint.contains("configmaps") && !hint.contains("webapps"),
        "{hint}"
    );
    // The sample reached its observed generation: Ready without a Ready condition.
    assert!(
        stdout.contains("ready: 1 Reconcilers Ready (dev-stray/stray); 1 parents Ready (dev-stray/hello)"),
        "{stdout}"
    );
}

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

/// `operon dev DIR` as an author leaves it open: on a saved change it
/// rebuilds, runs the fixtures and swaps the Reconciler (and `dist/` holds
/// what it built, so `operon test` beside it tests the same component); a
/// change whose fixtures fail is built and refused, and the running version
/// stays.
#[test]
fn operon_dev_should_rebuild_test_and_swap_on_a_change_and_keep_the_running_version_when_fixtures_fail() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::Duration;
    let scratch = tempfile::tempdir().unwrap();
    let project = new_c_project(scratch.path(), "loop");
    let mut child = Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["dev", "--metrics-bind-address", "127.0.0.1:0", "--kubeconfig"])
        .arg(plane().kubeconfig_path())
        .arg(&project)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running operon dev");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _child = Kill(child);
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let mut wait_for = |wanted: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                    if line.contains(wanted) {
                        return line;
                    }
                }
                Err(_) => panic!("operon dev never said {wanted:?}:\n{seen}"),
            }
        }
    };
    wait_for("watching the projects' sources");

    // A change the fixtures accept: rebuilt, tested, swapped in.
    let main = project.join("src/main.c");
    let source = std::fs::read_to_string(&main).unwrap();
    assert!(source.contains("\"publishing %s\""), "the C scaffold changed: update this test");
    std::fs::write(&main, source.replace("\"publishing %s\"", "\"publishing the greeting %s\"")).unwrap();
    let swapped = wait_for("✓ loop: built and");
    assert!(swapped.contains("fixtures passed") && swapped.contains("swapped in sha256:"), "{swapped}");
    let digest = swapped.rsplit("swapped in ").next().unwrap().trim().to_string();
    let dist = std::fs::read(project.join("dist/loop.wasm")).unwrap();
    assert_eq!(operon::reconciler::source::digest(&dist), digest, "dist/ is not what the loop swapped in");

    // A change the fixtures refuse: built, not swapped.
    let source = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, source.replace("\"%s-greeting\"", "\"%s-greetings\"")).unwrap();
    let refused = wait_for("✗ loop:");
    assert!(refused.contains("fixtures failed") && refused.contains("the running version stays"), "{refused}");
}

/// A plugin that calls out runs in `operon dev` from its project alone:
/// `[dev]` of `operon.toml` grants the egress and names a credential read
/// from a local file; `--record` writes the reconciles, calls included and
/// the credential's value never, as fixtures, and `operon explain` reads
/// them back.
#[test]
fn operon_dev_should_grant_egress_and_a_file_credential_from_the_project_and_record() {
    use std::io::{BufRead, BufReader, Write};
    // A server on loopback that answers `hi` and keeps the Authorization headers it saw.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    log.lock().unwrap().push(line.trim().to_string());
                }
                line.clear();
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi");
        }
    });

    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_operon"))
        .current_dir(scratch.path())
        .args(["new", "--lang", "python", "caller"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let project = scratch.path().join("caller");
    let url = format!("http://127.0.0.1:{port}/hello");
    let app = std::fs::read_to_string(project.join("app.py")).unwrap();
    let call = "        name = f\"{request.name}-greeting\"\n";
    assert!(app.contains(call), "the Python scaffold changed: update this test");
    let app = app
        .replace(call, &format!("        ctx.http(\"GET\", \"{url}\", credential=\"api\", timeout_ms=5000)\n{call}"));
    std::fs::write(project.join("app.py"), app).unwrap();
    for fixture in ["create.yaml", "published.yaml"] {
        let path = project.join("fixtures").join(fixture);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!(
            "egress:\n- request: {{method: GET, url: \"{url}\", credential: api}}\n  response: {{status: 200, body: hi}}\n"
        ));
        std::fs::write(&path, text).unwrap();
    }
    std::fs::write(project.join("api.key"), "t0ken-only-the-host-sees\n").unwrap();
    let mut toml = std::fs::read_to_string(project.join("operon.toml")).unwrap();
    toml.push_str(&format!(
        "\n[dev]\negress = [{{ scheme = \"http\", host = \"127.0.0.1\", port = {port} }}]\n\
         [[dev.credentials]]\nname = \"api\"\nuse = \"bearer\"\nhosts = [\"127.0.0.1\"]\nfile = \"api.key\"\n"
    ));
    std::fs::write(project.join("operon.toml"), toml).unwrap();

    let recordings = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["dev", "--once", "--timeout", "180", "--metrics-bind-address", "127.0.0.1:0", "--record"])
        .arg(recordings.path())
        .arg("--kubeconfig")
        .arg(plane().kubeconfig_path())
        .arg(&project)
        .output()
        .expect("running operon dev");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("operon explain greeting/NAME -n dev-caller --recordings"), "{stdout}");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|h| h.to_ascii_lowercase() == "authorization: bearer t0ken-only-the-host-sees"),
        "{seen:?}"
    );

    // The recording holds the call, by credential name, and never its value.
    let mut texts = Vec::new();
    let mut dirs = vec![recordings.path().to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                texts.push(std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    assert!(texts.iter().any(|t| t.contains(&url) && t.contains("credential: api")), "no call recorded: {texts:?}");
    assert!(!texts.iter().any(|t| t.contains("t0ken")), "the credential's value was recorded");
    let explained = Command::new(env!("CARGO_BIN_EXE_operon"))
        .args(["explain", "greeting/hello", "-n", "dev-caller", "--recordings"])
        .arg(recordings.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&explained.stdout);
    assert!(explained.status.success(), "{shown}{}", String::from_utf8_lossy(&explained.stderr));
    assert!(shown.contains(&format!("call: GET {url}")) && shown.contains("credential \"api\" → 200"), "{shown}");
}
