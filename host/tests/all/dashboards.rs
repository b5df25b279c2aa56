//! `deploy/dashboards/operon.json` against a real Prometheus scraping a real
//! `operon run` on loopback: every panel's query must parse and return
//! series. The scrape goes as it does in a cluster: HTTPS, with the token
//! of a ServiceAccount bound to the shipped `operon-metrics-reader`
//! ClusterRole, which the host has the API server review (TokenReview,
//! SubjectAccessReview). Another test checks the refusals: no token, a
//! token the API server does not know, a ServiceAccount without the role.
//!
//! The host runs the WebApp guest with leader election and its admission
//! webhooks on (the API server calls them when the test creates WebApps), so
//! reconciles, queue, guest, module, leader and webhook families all carry
//! real samples. Families that count rare events (traps, timeouts, swaps,
//! rollbacks, webhook guest failures) are exported at zero from the moment
//! a controller or webhook is registered, as controller-runtime does, so
//! their panels return series without the event having happened.
//!
//! Needs Debian's `prometheus` package (`apt-get install prometheus`): the
//! test fails, never skips, without it.

use crate::common;

use common::{free_port, webapp_crd};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Grafana's variables, as the test evaluates them: every controller (the
/// `$controller` variable's "All" value), a rate window of a few 1 s scrape
/// intervals (what `$__rate_interval` becomes with that scrape interval),
/// and the last five minutes for `$__range`.
const VARIABLES: &[(&str, &str)] =
    &[("$__rate_interval", "10s"), ("$__range", "5m"), ("${controller}", ".*"), ("$controller", ".*")];

fn plane() -> &'static operon_envtest::ControlPlane {
    operon_envtest::shared_named("dashboards", || operon_envtest::Options::with_controller_manager().crd(webapp_crd()))
}

/// A child process killed when dropped, with its log file for failures.
struct Process {
    child: Child,
    log: PathBuf,
    name: &'static str,
}

impl Process {
    fn spawn(name: &'static str, command: &mut Command, log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Process { child, log, name }
    }

    /// Panics with the log's tail if the process has exited.
    fn check(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}):\n{}", self.name, self.tail());
        }
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's Prometheus server; a clear failure if it is missing.
fn prometheus_binary() -> PathBuf {
    let candidates = [PathBuf::from("/usr/bin/prometheus")];
    let found = candidates.into_iter().find(|p| p.exists()).or_else(|| {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|dir| PathBuf::from(dir).join("prometheus"))
            .find(|p| p.exists())
    });
    found.unwrap_or_else(|| {
        panic!("the Prometheus server is not installed: `apt-get install prometheus` (Debian's package, /usr/bin/prometheus)")
    })
}

/// Every target expression of every panel, with the panel's title.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
                out.push((format!("{title} [{}]", target["refId"].as_str().unwrap_or("?")), expr.to_owned()));
            }
            walk(panel["panels"].as_array().map(Vec::as_slice).unwrap_or_default(), out);
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().expect("a dashboard with panels"), &mut out);
    out
}

fn substitute(expr: &str) -> String {
    VARIABLES.iter().fold(expr.to_owned(), |e, (var, value)| e.replace(var, value))
}

/// One instant query: `Ok(number of series)` or `Err(what Prometheus said)`.
async fn query(client: &reqwest::Client, base: &str, expr: &str) -> Result<usize, String> {
    let url = reqwest::Url::parse_with_params(&format!("{base}/api/v1/query"), &[("query", expr)]).unwrap();
    let response = client.get(url).send().await.map_err(|e| format!("request failed: {e}"))?;
    let body: Value = response.json().await.map_err(|e| format!("not JSON: {e}"))?;
    if body["status"] != "success" {
        return Err(format!("{}: {}", body["errorType"], body["error"]));
    }
    Ok(body["data"]["result"].as_array().map_or(0, Vec::len))
}

async fn create_webapp(client: &kube::Client, namespace: &str, name: &str, replicas: i64) {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name}, "spec": {"image": "nginx:1.27", "replicas": replicas}
    }))
    .unwrap();
    // The API server calls the guest's webhooks, which are registered a
    // moment after the host starts; retry while they are not reachable yet.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("creating WebApp {name}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("creating WebApp {name}: {e}"),
        }
    }
}

/// The shipped `operon-metrics-reader` ClusterRole (deploy/rbac.yaml), applied.
async fn apply_metrics_reader_role(client: &kube::Client) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let role = docs
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "operon-metrics-reader")
        .expect("deploy/rbac.yaml defines ClusterRole operon-metrics-reader");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"));
    let obj: DynamicObject = serde_json::from_value(role).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch("operon-metrics-reader", &PatchParams::apply("dashboards-test").force(), &Patch::Apply(&obj))
        .await
        .unwrap();
}

/// A ServiceAccount `name` in `namespace`, bound to operon-metrics-reader
/// when `reader`; returns a token of it (TokenRequest).
async fn service_account_token(client: &kube::Client, namespace: &str, name: &str, reader: bool) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    accounts
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
        .await
        .unwrap();
    if reader {
        apply_metrics_reader_role(client).await;
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"));
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{namespace}-{name}-metrics")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "operon-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        }))
        .unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &ar).create(&PostParams::default(), &binding).await.unwrap();
    }
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts.create_token_request(name, &PostParams::default(), &request).await.unwrap().status.unwrap().token
}

/// `GET url` over TLS (the host's certificate is self-signed), with a bearer
/// token if given: the status and the body.
async fn scrape(url: &str, token: Option<&str>) -> (u16, String) {
    operon::install_crypto_provider();
    let http = reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap();
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn metrics_are_refused_without_a_token_the_api_server_authorizes() {
    use operon::manager::{self, Manager};
    use operon::server::MetricsServing;
    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "metrics-auth").await.unwrap();
    let port = free_port();
    let config = manager::Config {
        server_addr: Some(([127, 0, 0, 1], port).into()),
        metrics_serving: MetricsServing::Https { cert_dir: None },
        probe_addr: None,
        ..Default::default()
    };
    let mgr = Manager::builder(client.clone()).config(config).build().await.unwrap();
    mgr.metrics().reconcile_finished("probe", operon::metrics::ReconcileResult::Success, Duration::from_millis(3));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(mgr.run(async move {
        let _ = stopped.await;
    }));
    let url = format!("https://127.0.0.1:{port}/metrics");
    let reader = service_account_token(&client, &ns, "reader", true).await;
    let stranger = service_account_token(&client, &ns, "stranger", false).await;

    // The server is up once it answers at all.
    common::eventually("the metrics server", Duration::from_secs(10), || async {
        let http = reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().ok()?;
        http.get(&url).send().await.ok()
    })
    .await;
    let (status, body) = scrape(&url, None).await;
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = scrape(&url, Some("not-a-token")).await;
    assert_eq!(status, 401, "a token the API server does not know: {body}");
    let (status, body) = scrape(&url, Some(&stranger)).await;
    assert_eq!(status, 403, "a ServiceAccount without the role: {body}");
    assert!(body.contains(&format!("system:serviceaccount:{ns}:stranger may not get /metrics")), "{body}");
    // The binding reaches the authorizer within moments.
    let body = common::eventually("the reader's scrape", Duration::from_secs(20), || async {
        let (status, body) = scrape(&url, Some(&reader)).await;
        (status == 200).then_some(body)
    })
    .await;
    assert!(body.contains(r#"controller_runtime_reconcile_total{controller="probe",result="success"} 1"#), "{body}");
    // Plain HTTP gets nothing from the HTTPS port.
    assert!(common::http_get(format!("http://127.0.0.1:{port}/metrics")).await.is_err());
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
}

#[tokio::test]
async fn every_dashboard_query_returns_series_from_a_real_prometheus_scraping_operon() {
    let prometheus = prometheus_binary();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dashboards/operon.json"))
            .unwrap(),
    )
    .expect("deploy/dashboards/operon.json is not JSON");
    let queries = panel_queries(&dashboard);
    assert!(queries.len() >= 20, "only {} panel queries", queries.len());

    let client = plane().client().await;
    let ns = operon_envtest::create_namespace(&client, "dashboards").await.unwrap();
    let dir = tempfile::tempdir().unwrap();

    // operon, with leader election and admission webhooks on loopback.
    let metrics_port = free_port();
    let webhook_port = free_port();
    let module = common::guests_dir().join("rust-webapp.wasm");
    assert!(module.exists(), "{} is missing: run `cargo xtask guests`", module.display());
    let mut operon = Process::spawn(
        "operon",
        Command::new(env!("CARGO_BIN_EXE_operon"))
            .arg("run")
            .arg("--module")
            .arg(&module)
            .args(["--namespace", &ns, "--leader-elect", "--leader-election-namespace", &ns])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics_port}")])
            .args(["--health-probe-bind-address", "0"])
            .args(["--webhook-bind-address", &format!("127.0.0.1:{webhook_port}")])
            .env("KUBECONFIG", plane().kubeconfig_path())
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("RUST_LOG", "info"),
        dir.path().join("operon.log"),
    );

    // Prometheus, scraping it every second over HTTPS with the token of a
    // ServiceAccount bound to operon-metrics-reader (as a ServiceMonitor does).
    let token = dir.path().join("prometheus.token");
    std::fs::write(&token, service_account_token(&client, &ns, "prometheus", true).await).unwrap();
    let prometheus_port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: operon\n    \
             scrape_interval: 1s\n    scrape_timeout: 1s\n    scheme: https\n    tls_config:\n      insecure_skip_verify: true\n    \
             authorization:\n      type: Bearer\n      credentials_file: {}\n    \
             static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n",
            token.display()
        ),
    )
    .unwrap();
    let mut prom = Process::spawn(
        "prometheus",
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
            .arg("--log.level=warn"),
        dir.path().join("prometheus.log"),
    );
    let base = format!("http://127.0.0.1:{prometheus_port}");
    operon::install_crypto_provider();
    let http = reqwest::Client::new();

    // Parents to reconcile: each create also goes through the webhooks.
    for (i, replicas) in [1, 2, 3].into_iter().enumerate() {
        operon.check();
        create_webapp(&client, &ns, &format!("web-{i}"), replicas).await;
    }

    // Prometheus has scraped operon after the reconciles and the admission
    // requests (the families appear with their first samples). A WebApp
    // created before the host wrote its webhook configurations is admitted
    // without a call, so another is created every few seconds until one is.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut next_create = Instant::now() + Duration::from_secs(3);
    let mut created = 3;
    loop {
        operon.check();
        prom.check();
        if Instant::now() >= next_create {
            create_webapp(&client, &ns, &format!("web-{created}"), 1).await;
            created += 1;
            next_create = Instant::now() + Duration::from_secs(3);
        }
        let ready = query(&http, &base, "sum(controller_runtime_reconcile_total) > 0").await.unwrap_or(0) > 0
            && query(&http, &base, "sum(controller_runtime_webhook_requests_total) > 0").await.unwrap_or(0) > 0
            && query(&http, &base, "up{job=\"operon\"} == 1").await.unwrap_or(0) > 0;
        if ready {
            break;
        }
        if Instant::now() >= deadline {
            // What Prometheus itself says about the target: whether it scraped
            // at all, and the last scrape error if it did.
            let targets = match http.get(format!("{base}/api/v1/targets")).send().await {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(e) => format!("(Prometheus did not answer: {e})"),
            };
            panic!(
                "Prometheus never saw operon's reconciles and webhook requests\noperon:\n{}\nprometheus:\n{}\ntargets:\n{targets}",
                operon.tail(),
                prom.tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A few more scrapes, so that every rate window holds two samples.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Every query must parse and return series; a query that returns none
    // gets a few more seconds (a rate needs two samples) before failing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pending: Vec<(String, String)> = queries.clone();
    let mut failures = Vec::new();
    while !pending.is_empty() {
        let mut still = Vec::new();
        failures.clear();
        for (panel, expr) in pending {
            let evaluated = substitute(&expr);
            match query(&http, &base, &evaluated).await {
                Ok(n) if n > 0 => {}
                Ok(_) => {
                    failures.push(format!("{panel}: no series for {evaluated}"));
                    still.push((panel, expr));
                }
                // A parse error does not get better with time.
                Err(e) => panic!("{panel}: Prometheus refused {evaluated}: {e}"),
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} dashboard queries return no series:\n{}\noperon:\n{}",
            failures.len(),
            queries.len(),
            failures.join("\n"),
            operon.tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("{} dashboard queries evaluated by Prometheus, each returned series", queries.len());
}

#[test]
fn every_dashboard_metric_is_a_family_the_host_exports() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dashboards/operon.json"))
            .unwrap(),
    )
    .unwrap();
    let metrics = operon::metrics::Metrics::new();
    let mut names: Vec<String> = Vec::new();
    for family in metrics.families() {
        names.push(family.name.clone());
        if family.kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.push(format!("{}{suffix}", family.name));
            }
        }
    }
    for (panel, expr) in panel_queries(&dashboard) {
        // Identifiers directly followed by `{` or `[` or `)` are series
        // selectors in these expressions; check every word that looks like a
        // metric family of ours.
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let ours = ["controller_runtime_", "workqueue_", "leader_election_", "operon_"]
                .iter()
                .any(|p| word.starts_with(p));
            assert!(!ours || names.iter().any(|n| n == word), "{panel}: {word} is not a metric the host exports");
        }
    }
}
