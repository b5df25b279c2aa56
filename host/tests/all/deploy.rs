//! `deploy/` against a real kube-apiserver: the Helm chart (default values,
//! and with webhooks, the ServiceMonitor and extra grants on), the kustomize
//! base, the plain manifests and the WebApp plugin example are rendered with
//! the real tools and every document is applied with server-side dry run;
//! the RBAC model is checked with SubjectAccessReviews against the API
//! server's RBAC authorizer. The chart is also packaged, pushed to a real
//! OCI registry on loopback (`helm push`) and installed from it (`helm
//! install oci://…`), as a cluster admin installs a published chart.
//!
//! helm and kustomize are built from the pinned Go modules in
//! `deploy/tools/{helm,kustomize}` through the Go module proxy into
//! `~/.cache/operon/tools` (`$OPERON_TOOLS_DIR`); a cached binary is reused
//! when the module version it was built from (`go version -m`) is the one
//! go.mod pins. A fresh machine needs only `go`.

use crate::common;

use common::webapp_crd;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

const NAMESPACE: &str = "operon-system";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The CRDs the rendered documents need served: ours (from the generated
/// files, not the Rust types, so the shipped YAML is what is tested), the
/// WebApp's (for the plugin example), and a minimal ServiceMonitor CRD.
fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("deploy", || {
        let mut options =
            operon_envtest::Options::with_controller_manager().crd(webapp_crd()).crd(service_monitor_crd());
        for file in ["operon.dev_reconcilers.yaml", "operon.dev_clusterreconcilers.yaml"] {
            let text = std::fs::read_to_string(root().join("deploy/crds").join(file)).unwrap();
            options = options.crd(serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("deploy/crds/{file}: {e}")));
        }
        options
    })
}

/// `monitoring.coreos.com/v1` `ServiceMonitor`, schemaless. The Prometheus
/// Operator (which ships the real CRD) is in no package registry the tests
/// may install from, so only the kind is served here: the dry run then
/// checks the document's shape (apiVersion, kind, metadata, namespace), not
/// the Operator's schema of `spec`.
fn service_monitor_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor", "listKind": "ServiceMonitorList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .unwrap()
}

/// Where built tools are cached.
fn tools_dir() -> PathBuf {
    std::env::var_os("OPERON_TOOLS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME is not set; set OPERON_TOOLS_DIR");
        PathBuf::from(home).join(".cache/operon/tools")
    })
}

/// The version of `module` that `deploy/tools/<name>/go.mod` requires.
fn pinned_version(name: &str, module: &str) -> String {
    let path = root().join("deploy/tools").join(name).join("go.mod");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(module)).then(|| words.next().map(str::to_owned)).flatten()
        })
        .unwrap_or_else(|| panic!("{} does not require {module}", path.display()))
}

/// The version of `module` a Go binary was built from (`go version -m`), or
/// `None` if the binary is missing or says nothing about it.
fn built_version(bin: &Path, module: &str) -> Option<String> {
    if !bin.exists() {
        return None;
    }
    let out = Command::new("go").arg("version").arg("-m").arg(bin).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        (words.len() >= 3 && words[0] == "mod" && words[1] == module).then(|| words[2].to_owned())
    })
}

/// `name` built from `deploy/tools/<name>` (the `package` of `module`),
/// through the Go module proxy, unless the cached binary is that version.
fn go_tool(name: &str, module: &str, package: &str) -> PathBuf {
    // The tests of this binary run in parallel; one build per tool.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _guard = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    let want = pinned_version(name, module);
    let bin = tools_dir().join(name);
    if built_version(&bin, module).as_deref() == Some(want.as_str()) {
        return bin;
    }
    std::fs::create_dir_all(tools_dir()).unwrap();
    let dir = root().join("deploy/tools").join(name);
    // Another process may build at the same time: build aside, then rename.
    let tmp = tools_dir().join(format!(".{name}.{}", std::process::id()));
    eprintln!(
        "building {name} ({module} {want}) from {} through the Go module proxy into {} (minutes on a cold Go cache)",
        dir.display(),
        bin.display()
    );
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&tmp)
        .arg(package)
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `go` ({e}): install Go (e.g. `apt-get install golang-go`, 1.26+)"));
    assert!(
        out.status.success(),
        "`go build {package}` in {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &bin).unwrap();
    assert_eq!(built_version(&bin, module).as_deref(), Some(want.as_str()), "{} is not {module} {want}", bin.display());
    bin
}

fn helm() -> PathBuf {
    go_tool("helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm")
}

fn kustomize() -> PathBuf {
    go_tool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", "sigs.k8s.io/kustomize/kustomize/v5")
}

/// Runs a renderer; its stdout, or a panic with its stderr.
fn render(mut command: Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(out.status.success(), "{command:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `helm template` of the chart into `operon-system`, CRDs included.
fn helm_template(extra: &[&str]) -> String {
    let mut command = Command::new(helm());
    command
        .args(["template", "operon"])
        .arg(root().join("deploy/helm/operon"))
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .args(extra);
    render(command)
}

/// The documents of a multi-document YAML stream (empty ones dropped).
fn documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn kind_name(doc: &Value) -> String {
    format!("{} {}", doc["kind"].as_str().unwrap_or("?"), doc["metadata"]["name"].as_str().unwrap_or("?"))
}

/// Applies `doc` for real (server-side apply), for what the dry runs need.
async fn apply(client: &kube::Client, doc: &Value) {
    let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
    api_for(client, &obj)
        .await
        .patch(
            &obj.metadata.name.clone().unwrap(),
            &PatchParams::apply("operon-deploy-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {}: {e}", kind_name(doc)));
}

async fn api_for(client: &kube::Client, obj: &DynamicObject) -> Api<DynamicObject> {
    let types = obj.types.clone().expect("a document without apiVersion/kind");
    let (group, version) = types.api_version.rsplit_once('/').unwrap_or(("", &types.api_version));
    let (ar, caps) =
        pinned_kind(client, &GroupVersionKind::gvk(group, version, &types.kind)).await.unwrap_or_else(|e| {
            panic!("{} {}: the API server does not serve this kind: {e}", types.api_version, types.kind)
        });
    match (caps.scope, &obj.metadata.namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        (Scope::Namespaced, None) => Api::namespaced_with(client.clone(), "default", &ar),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    apply(client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
}

/// Applies every document with server-side dry run; fails listing each
/// refused document with the API server's message.
async fn dry_run_all(what: &str, docs: &[Value]) {
    let client = plane().client().await;
    ensure_namespace(&client, NAMESPACE).await;
    let params = PatchParams::apply("operon-deploy-test").force().dry_run();
    let mut refused = Vec::new();
    for doc in docs {
        let obj: DynamicObject = match serde_json::from_value(doc.clone()) {
            Ok(obj) => obj,
            Err(e) => {
                refused.push(format!("{}: not a Kubernetes object: {e}", kind_name(doc)));
                continue;
            }
        };
        let name = obj.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api_for(&client, &obj).await.patch(&name, &params, &Patch::Apply(&obj)).await {
            refused.push(format!("{}: {e}", kind_name(doc)));
        }
    }
    assert!(
        refused.is_empty(),
        "{what}: the API server refused {} of {} documents:\n{}",
        refused.len(),
        docs.len(),
        refused.join("\n")
    );
    eprintln!("{what}: {} documents accepted by server-side dry run", docs.len());
}

/// The `kind name` of every document, to check what was rendered.
fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter().map(kind_name).collect()
}

fn has(docs: &[Value], kind_and_name: &str) -> bool {
    kinds(docs).iter().any(|k| k == kind_and_name)
}

fn deployment_args(docs: &[Value]) -> Vec<String> {
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn helm_chart_with_default_values_passes_server_side_dry_run() {
    let docs = documents(&helm_template(&[]));
    for expected in [
        "CustomResourceDefinition reconcilers.operon.dev",
        "CustomResourceDefinition clusterreconcilers.operon.dev",
        "ServiceAccount operon",
        "ClusterRole operon",
        "ClusterRole operon-plugin-reads",
        "Role operon-leader-election",
        "Deployment operon",
        "Service operon",
        "NetworkPolicy operon",
        "FlowSchema operon-leader-election",
    ] {
        assert!(has(&docs, expected), "the chart renders no {expected}: {:?}", kinds(&docs));
    }
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceMonitor"), "the ServiceMonitor is off by default");
    // The metrics port only from the scrapers' namespace; no webhook port
    // while webhooks are off; the probes from the node only (listed nowhere).
    let policy = docs.iter().find(|d| d["kind"] == "NetworkPolicy").unwrap();
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{policy}");
    assert_eq!(ingress[0]["ports"][0]["port"], "metrics", "{policy}");
    assert_eq!(
        ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], "monitoring",
        "{policy}"
    );
    let flow = docs.iter().find(|d| d["kind"] == "FlowSchema").unwrap();
    assert_eq!(flow["spec"]["priorityLevelConfiguration"]["name"], "leader-election", "{flow}");
    assert_eq!(flow["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["name"], "operon", "{flow}");
    assert_eq!(flow["spec"]["rules"][0]["resourceRules"][0]["resources"], json!(["leases"]), "{flow}");
    assert!(has(&docs, "ClusterRole operon-metrics-reader"), "{:?}", kinds(&docs));
    let args = deployment_args(&docs);
    for flag in [
        "--leader-elect",
        "--lease-per-reconciler",
        "--require-service-account",
        "--metrics-bind-address=:8443",
        "--leader-elect-lease-duration=15s",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} missing from {args:?}");
    }
    assert!(!args.iter().any(|a| a.starts_with("--metrics-secure")), "metrics are HTTPS by default: {args:?}");
    let image =
        &docs.iter().find(|d| d["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(
        image,
        &json!(format!("ghcr.io/operon-dev/operon:{}", env!("CARGO_PKG_VERSION"))),
        "the image xtask builds"
    );
    assert!(!args.iter().any(|a| a == "--webhook-bind-address=:9443"), "webhooks are off by default: {args:?}");
    dry_run_all("helm template (default values)", &docs).await;
}

#[tokio::test]
async fn helm_chart_with_webhooks_service_monitor_and_extra_grants_passes_server_side_dry_run() {
    let docs = documents(&helm_template(&[
        "--set",
        "webhooks.enabled=true,serviceMonitor.enabled=true,replicas=3,logFormat=text",
        "--set",
        "otlpEndpoint=http://otel-collector.observability:4318",
        "--set",
        "extraGrants[0].apiGroups[0]=example.operon.dev,extraGrants[0].resources[0]=webapps",
        "--set",
        "metrics.certSecretName=operon-metrics-tls,metrics.readers[0].name=prometheus,metrics.readers[0].namespace=monitoring",
        "--set",
        "egressAllow={api.example.com,10.0.0.0/8}",
        "--set",
        "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24,webhooks.clientCAKey=client-ca.crt",
    ]));
    assert!(has(&docs, "ServiceMonitor operon"), "{:?}", kinds(&docs));
    // The webhook port only from the API server's addresses, as given.
    let policy = docs.iter().find(|d| d["kind"] == "NetworkPolicy").unwrap();
    let webhook = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["ports"][0]["port"] == "webhook")
        .unwrap_or_else(|| panic!("no rule for the webhook port: {policy}"));
    assert_eq!(webhook["from"], json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}]), "{policy}");
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--egress-allow=api.example.com,10.0.0.0/8"), "{args}");
    let monitor = docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https", "{monitor}");
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["name"], "operon-metrics-tls", "{monitor}");
    assert!(endpoint["bearerTokenFile"].is_string(), "{monitor}");
    let binding =
        docs.iter().find(|d| kind_name(d) == "ClusterRoleBinding operon-metrics-reader").expect("the readers' binding");
    assert_eq!(binding["subjects"][0]["namespace"], "monitoring");
    let extra =
        docs.iter().find(|d| kind_name(d) == "ClusterRole operon-extra-reads").expect("the extra-reads ClusterRole");
    assert_eq!(extra["metadata"]["labels"]["operon.dev/aggregate-to-operon"], "true");
    assert_eq!(extra["rules"][0]["resources"], json!(["webapps"]));
    assert_eq!(extra["rules"][0]["verbs"], json!(["get", "list", "watch"]));
    let args = deployment_args(&docs);
    assert!(args.iter().any(|a| a == "--webhook-bind-address=:9443"), "{args:?}");
    assert!(args.iter().any(|a| a == "--metrics-cert-path=/metrics-certs"), "{args:?}");
    for flag in [
        "--webhook-client-ca-file=/certs/client-ca.crt",
        "--webhook-max-connections=512",
        "--webhook-max-connections-per-client=128",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} missing from {args:?}");
    }
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 3);
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env.as_array().unwrap().iter().any(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"), "{env}");
    let service = docs.iter().find(|d| d["kind"] == "Service").unwrap();
    assert!(service["spec"]["ports"].as_array().unwrap().iter().any(|p| p["port"] == 443), "{service}");
    dry_run_all("helm template (webhooks, serviceMonitor, extraGrants)", &docs).await;
}

/// With `moduleVerification.required`, the chart starts the host with
/// `--require-signed-modules` and the keys mounted from a ConfigMap of its
/// own; without a key it refuses to render.
#[tokio::test]
async fn helm_chart_requiring_signed_modules_mounts_the_keys_and_passes_server_side_dry_run() {
    let scratch = tempfile::tempdir().unwrap();
    let values = scratch.path().join("values.yaml");
    let pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEL1Q5yYfQejOzhsFKJAQsfar5bFVb\nAgVJNTyex/CglG5uglfNZfjjcgy8JRwuw/Gf/Z5gp5+sVVD/SCW2gTYETw==\n-----END PUBLIC KEY-----\n";
    let text = format!(
        "moduleVerification:\n  required: true\n  keys:\n    platform.pub: |\n{}",
        pem.lines().map(|l| format!("      {l}\n")).collect::<String>()
    );
    std::fs::write(&values, text).unwrap();
    let docs = documents(&helm_template(&["-f", values.to_str().unwrap()]));
    let args = deployment_args(&docs);
    assert!(args.iter().any(|a| a == "--require-signed-modules"), "{args:?}");
    assert!(args.iter().any(|a| a == "--trusted-module-key=/etc/operon/module-keys"), "{args:?}");
    let keys = docs.iter().find(|d| kind_name(d) == "ConfigMap operon-module-keys").expect("the keys' ConfigMap");
    assert_eq!(keys["data"]["platform.pub"], pem);
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].to_string();
    assert!(mounts.contains("/etc/operon/module-keys"), "{mounts}");
    dry_run_all("helm template (moduleVerification)", &docs).await;

    let out = Command::new(helm())
        .args(["template", "operon"])
        .arg(root().join("deploy/helm/operon"))
        .args(["--set", "moduleVerification.required=true"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a requirement without a key must not render");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs at least one key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The chart of the release directory (`cargo xtask release`, or the one
/// `cargo xtask test` assembles), installed from the file a user
/// downloads: every document passes server-side dry run.
#[tokio::test]
async fn the_release_directorys_chart_passes_server_side_dry_run() {
    let dir =
        std::env::var_os("OPERON_RELEASE_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target/release-dir"));
    let chart = dir.join(format!("operon-{}.tgz", env!("CARGO_PKG_VERSION")));
    assert!(
        chart.exists(),
        "{} is missing: run `cargo xtask release --ephemeral-key` (or `cargo xtask test`) first",
        chart.display()
    );
    let mut command = Command::new(helm());
    command.args(["template", "operon"]).arg(&chart).args(["--namespace", NAMESPACE, "--include-crds"]);
    let docs = documents(&render(command));
    assert!(
        has(&docs, "Deployment operon") && has(&docs, "CustomResourceDefinition reconcilers.operon.dev"),
        "{:?}",
        kinds(&docs)
    );
    dry_run_all("the release's chart", &docs).await;
}

#[tokio::test]
async fn kustomize_base_passes_server_side_dry_run() {
    let mut command = Command::new(kustomize());
    command.arg("build").arg(root().join("deploy/kustomize"));
    let docs = documents(&render(command));
    for expected in [
        "Namespace operon-system",
        "CustomResourceDefinition reconcilers.operon.dev",
        "CustomResourceDefinition clusterreconcilers.operon.dev",
        "ClusterRole operon",
        "ClusterRole operon-plugin-reads",
        "Deployment operon",
        "Service operon",
        "NetworkPolicy operon",
        "FlowSchema operon-leader-election",
    ] {
        assert!(has(&docs, expected), "the kustomize base renders no {expected}: {:?}", kinds(&docs));
    }
    dry_run_all("kustomize build deploy/kustomize", &docs).await;
}

#[tokio::test]
async fn plain_manifests_and_the_webapp_plugin_example_pass_server_side_dry_run() {
    let client = plane().client().await;
    ensure_namespace(&client, "shop").await;
    let mut docs = Vec::new();
    for file in ["rbac.yaml", "operon.yaml", "servicemonitor.yaml", "examples/webapp-plugin.yaml"] {
        let path = root().join("deploy").join(file);
        docs.extend(documents(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))));
    }
    assert!(has(&docs, "Reconciler webapp") && has(&docs, "ServiceMonitor operon"), "{:?}", kinds(&docs));
    dry_run_all("deploy/*.yaml and deploy/examples", &docs).await;
}

#[test]
fn chart_and_kustomize_crds_are_the_generated_ones() {
    let generated = root().join("deploy/crds");
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let expected = names(&generated);
    assert!(expected.len() >= 2, "deploy/crds holds {expected:?}");
    for copy in ["deploy/helm/operon/crds", "deploy/kustomize/crds"] {
        let dir = root().join(copy);
        assert_eq!(names(&dir), expected, "{copy} must hold the files of deploy/crds: cp deploy/crds/*.yaml {copy}/");
        for name in &expected {
            assert!(
                std::fs::read(dir.join(name)).unwrap() == std::fs::read(generated.join(name)).unwrap(),
                "{copy}/{name} differs from deploy/crds/{name}: cp deploy/crds/*.yaml {copy}/"
            );
        }
    }
}

/// `(user, verb, group, resource, namespace, name, expected answer)`.
type Check<'a> = (&'a str, &'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>, bool);

/// Whether `user` may do `verb` on `resource` (in `namespace`), as the API
/// server's RBAC authorizer answers a SubjectAccessReview.
async fn allowed(
    client: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await.unwrap();
    answer.status.expect("a SubjectAccessReview without status").allowed
}

/// Whether `user` may `get` the non-resource `path` (e.g. `/metrics`).
async fn may_get(client: &kube::Client, user: &str, path: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            non_resource_attributes: Some(NonResourceAttributes { path: Some(path.into()), verb: Some("get".into()) }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await.unwrap();
    answer.status.expect("a SubjectAccessReview without status").allowed
}

/// The RBAC model of docs/deploy.md, applied for real: the host may watch
/// Reconcilers, read module ConfigMaps, impersonate the plugin's
/// ServiceAccount and hold its Leases, but cannot write a plugin's children
/// itself; the plugin's ServiceAccount may write its children in its own
/// namespace only.
#[tokio::test]
async fn the_rbac_model_gives_the_host_reads_and_impersonation_and_the_plugin_its_writes() {
    let client = plane().client().await;
    ensure_namespace(&client, NAMESPACE).await;
    ensure_namespace(&client, "shop").await;
    for file in ["rbac.yaml", "examples/webapp-plugin.yaml"] {
        for doc in documents(&std::fs::read_to_string(root().join("deploy").join(file)).unwrap()) {
            if doc["kind"] != "Reconciler" {
                apply(&client, &doc).await;
            }
        }
    }
    let host = "system:serviceaccount:operon-system:operon";
    let plugin = "system:serviceaccount:shop:webapp-plugin";
    let prometheus = "system:serviceaccount:monitoring:prometheus";
    apply(
        &client,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "prometheus-operon-metrics"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "operon-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
        }),
    )
    .await;
    let checks: &[Check] = &[
        (host, "watch", "operon.dev", "reconcilers", None, None, true),
        (host, "list", "operon.dev", "clusterreconcilers", None, None, true),
        (host, "patch", "operon.dev", "reconcilers/status", Some("shop"), None, true),
        (host, "update", "operon.dev", "reconcilers", Some("shop"), None, false),
        // Its own finalizer on Reconcilers (released parents first).
        (host, "patch", "operon.dev", "reconcilers", Some("shop"), None, true),
        (host, "list", "", "configmaps", None, None, true),
        (host, "impersonate", "", "serviceaccounts", Some("shop"), Some("webapp-plugin"), true),
        (host, "create", "coordination.k8s.io", "leases", Some(NAMESPACE), None, true),
        (host, "create", "coordination.k8s.io", "leases", Some("shop"), None, false),
        (host, "create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", None, None, true),
        (host, "create", "events.k8s.io", "events", Some("shop"), None, true),
        // Who may read /metrics is asked of the API server.
        (host, "create", "authentication.k8s.io", "tokenreviews", None, None, true),
        (host, "create", "authorization.k8s.io", "subjectaccessreviews", None, None, true),
        // Writes of children are the plugin's, never the host's.
        (host, "create", "apps", "deployments", Some("shop"), None, false),
        (host, "patch", "apps", "deployments", Some("shop"), None, false),
        (host, "get", "", "secrets", Some("shop"), None, false),
        (host, "create", "rbac.authorization.k8s.io", "rolebindings", Some("shop"), None, false),
        (plugin, "patch", "apps", "deployments", Some("shop"), None, true),
        (plugin, "delete", "", "services", Some("shop"), None, true),
        (plugin, "patch", "example.operon.dev", "webapps/status", Some("shop"), None, true),
        (plugin, "patch", "apps", "deployments", Some("default"), None, false),
        (plugin, "create", "", "secrets", Some("shop"), None, false),
    ];
    // Bindings reach the authorizer's informers within moments: retry until
    // every answer is right, and report the wrong ones if they stay wrong.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut wrong = Vec::new();
        for (user, verb, group, resource, namespace, name, expected) in checks {
            if allowed(&client, user, verb, group, resource, *namespace, *name).await != *expected {
                wrong.push(format!("{user} {verb} {group}/{resource} in {namespace:?}: expected allowed={expected}"));
            }
        }
        // /metrics is read by whoever is bound to operon-metrics-reader
        // (the test's binding stands for a Prometheus'), not by the host.
        for (user, expected) in [(prometheus, true), (host, false), (plugin, false)] {
            if may_get(&client, user, "/metrics").await != expected {
                wrong.push(format!("{user} get /metrics: expected allowed={expected}"));
            }
        }
        if wrong.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the RBAC authorizer disagrees with the model:\n{}",
            wrong.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The plugin's reads reach the host through aggregation: the example's
    // ClusterRole carries the label operon-plugin-reads selects. (Filling
    // the aggregated rules is kube-controller-manager's
    // clusterrole-aggregation controller, which the test control plane
    // does not run, so the selector match is what is checked here.)
    let rbac = documents(&std::fs::read_to_string(root().join("deploy/rbac.yaml")).unwrap());
    let aggregated = rbac.iter().find(|d| kind_name(d) == "ClusterRole operon-plugin-reads").unwrap();
    let selector = &aggregated["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"];
    let example = documents(&std::fs::read_to_string(root().join("deploy/examples/webapp-plugin.yaml")).unwrap());
    let reads = example.iter().find(|d| kind_name(d) == "ClusterRole operon-plugin-webapp-reads").unwrap();
    for (key, value) in selector.as_object().expect("a matchLabels selector") {
        assert_eq!(&reads["metadata"]["labels"][key], value, "the example's reads are not aggregated: label {key}");
    }
}

/// `helm` with its configuration, cache and registry credentials in `home`
/// (nothing of the machine's), against the test control plane.
fn helm_in(home: &Path) -> Command {
    let mut command = Command::new(helm());
    command
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"))
        .env("KUBECONFIG", plane().kubeconfig_path());
    command
}

/// The chart as a cluster admin gets a published one: `helm package`,
/// `helm push` to a real OCI registry on loopback, then `helm template` and
/// `helm install` from `oci://…`. What comes back passes the server-side dry
/// run, installs, and gives the host the RBAC the model says (metrics
/// reviews included).
#[tokio::test]
async fn the_chart_pushed_to_an_oci_registry_installs_from_it() {
    let version = env!("CARGO_PKG_VERSION");
    let home = tempfile::tempdir().unwrap();
    let registry = operon_envtest::Registry::start(&home.path().join("registry")).unwrap();
    let packaged = home.path().join("packaged");
    render({
        let mut c = helm_in(home.path());
        c.arg("package").arg(root().join("deploy/helm/operon")).arg("--destination").arg(&packaged);
        c
    });
    let archive = packaged.join(format!("operon-{version}.tgz"));
    assert!(archive.is_file(), "helm package wrote no {}", archive.display());
    let pushed = {
        let mut c = helm_in(home.path());
        c.arg("push").arg(&archive).arg(format!("oci://{}/charts", registry.addr())).arg("--plain-http");
        let out = c.output().unwrap();
        assert!(out.status.success(), "helm push failed:\n{}", String::from_utf8_lossy(&out.stderr));
        // helm reports the push on stderr: "Pushed: …", "Digest: sha256:…".
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(pushed.contains("Digest: sha256:"), "{pushed}");
    let reference = format!("oci://{}/charts/operon", registry.addr());

    // `helm template` from the registry: the same documents pass the dry run.
    let namespace = "operon-oci";
    let docs = documents(&render({
        let mut c = helm_in(home.path());
        c.args(["template", "operon-oci", &reference, "--version", version, "--plain-http"])
            .args(["--namespace", namespace]);
        c
    }));
    assert!(
        has(&docs, "Deployment operon-oci") && has(&docs, "ClusterRole operon-oci-metrics-reader"),
        "{:?}",
        kinds(&docs)
    );
    let client = plane().client().await;
    ensure_namespace(&client, namespace).await;
    dry_run_all("helm template oci://… (default values)", &docs).await;

    // `helm install` from the registry, for real (CRDs are the plane's).
    render({
        let mut c = helm_in(home.path());
        c.args(["install", "operon-oci", &reference, "--version", version, "--plain-http", "--skip-crds"])
            .args(["--namespace", namespace]);
        c
    });
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace).get("operon-oci").await.unwrap();
    let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some(format!("ghcr.io/operon-dev/operon:{version}").as_str()));
    let host = format!("system:serviceaccount:{namespace}:operon-oci");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answers = [
            allowed(&client, &host, "watch", "operon.dev", "reconcilers", None, None).await,
            allowed(&client, &host, "create", "authentication.k8s.io", "tokenreviews", None, None).await,
            allowed(&client, &host, "create", "authorization.k8s.io", "subjectaccessreviews", None, None).await,
            !allowed(&client, &host, "create", "apps", "deployments", Some(namespace), None).await,
        ];
        if answers.iter().all(|a| *a) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the installed chart's RBAC: {answers:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    render({
        let mut c = helm_in(home.path());
        c.args(["uninstall", "operon-oci", "--namespace", namespace]);
        c
    });
}
