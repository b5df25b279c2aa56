//! What an admission webhook costs a write (`cargo xtask bench admission`):
//! the WebApp guest's `validate` and `mutate` served by the host's HTTPS
//! server to a real kube-apiserver, against the same creates without a
//! webhook, in one run.
//!
//! Two namespaces of one control plane: `hooked`, which the plugin's
//! webhook configurations select, and `plain`, which they do not. Creates
//! (valid WebApps, ~300 bytes each) alternate between them one at a time,
//! so drift weighs on both alike; each create's round trip is timed from
//! the request to the response. Then the handler alone: the same review
//! answered in-process by `Webhooks::answer` (routing, JSON, the guest call
//! under its sandbox; no TLS, no API server), for `mutate` and `validate`.
//!
//! Options: `--creates N` (per namespace, default 300), `--calls N`
//! (in-process answers per hook, default 2000).

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use operon::manager::{self, Manager};
use operon::runtime::{self, Limits, Runtime};
use operon::webhook::{self, FailurePolicy, Hook, Registration};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn arg(name: &str, default: usize) -> usize {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// p50, p99 and max of `samples`, in milliseconds.
fn percentiles(samples: &mut [Duration]) -> (f64, f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).saturating_sub(1).min(samples.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(at(0.50)), ms(at(0.99)), ms(samples[samples.len() - 1]))
}

fn webapp(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name},
        "spec": {"image": "nginx:1.27", "replicas": 3, "env": [{"name": "MODE", "value": "production"}]}
    }))
    .unwrap()
}

fn main() {
    operon::install_crypto_provider();
    let creates = arg("--creates", 300);
    let calls = arg("--calls", 2000);
    let crd_text = std::fs::read_to_string(root().join("guest-examples/webapp/crd.yaml")).unwrap();
    // Without the schema's default for `spec.port`: a stored port then shows
    // that the guest's `mutate` ran (and only where the webhook applies).
    let mut crd: serde_json::Value = serde_saphyr::from_str(&crd_text).expect("guest-examples/webapp/crd.yaml is YAML");
    crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/port")
        .and_then(serde_json::Value::as_object_mut)
        .and_then(|port| port.remove("default"))
        .expect("the WebApp CRD defaults spec.port");
    let crd = serde_json::from_value(crd).expect("guest-examples/webapp/crd.yaml is a CRD");
    let started = Instant::now();
    let plane = operon_envtest::ControlPlane::start(operon_envtest::Options::default().crd(crd))
        .expect("starting the control plane (cargo xtask envtest, or KUBEBUILDER_ASSETS)");
    eprintln!("bench: control plane up in {:.1?}", started.elapsed());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(&plane, creates, calls));
}

async fn run(plane: &operon_envtest::ControlPlane, creates: usize, calls: usize) {
    let client = plane.client().await;
    let hooked = operon_envtest::create_namespace(&client, "hooked").await.unwrap();
    let plain = operon_envtest::create_namespace(&client, "plain").await.unwrap();

    let runtime = Runtime::new(runtime::Config { artifact_dir: None, ..Default::default() }).unwrap();
    let bytes = std::fs::read(root().join("target/guests/rust-webapp.wasm"))
        .expect("target/guests/rust-webapp.wasm: run `cargo xtask guests rust-webapp`");
    let module = runtime.load(&bytes, Limits::default()).unwrap();
    // The webhooks call the controller's module; the controller itself need
    // not run (nothing reconciles, so only the creates load the API server).
    let config = webhook::Config {
        bind: ([127, 0, 0, 1], 0).into(),
        cert_dir: None,
        endpoint: webhook::Endpoint::Url { host: "127.0.0.1".into(), port: None },
        ..Default::default()
    };
    let mgr = Manager::builder(client.clone())
        .config(manager::Config { server_addr: None, ..Default::default() })
        .webhooks(config)
        .build()
        .await
        .unwrap();
    let controller = mgr.add(module);
    let webhooks = mgr.webhooks().unwrap().clone();
    let mut plugin = Registration::new("bench", controller, mgr.leadership("bench"));
    plugin.failure_policy = FailurePolicy::Fail;
    plugin.scope_namespace = Some(hooked.clone());
    webhooks.register(plugin).await.unwrap();

    let gvk = GroupVersionKind::gvk("example.operon.dev", "v1alpha1", "WebApp");
    let ar = ApiResource::from_gvk(&gvk);
    let hooked_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &hooked, &ar);
    let plain_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &plain, &ar);

    // Wait until the API server calls the webhook: a WebApp without a port
    // is stored with the guest's default only then.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe =
            hooked_api.create(&PostParams { dry_run: true, ..Default::default() }, &webapp("probe")).await.unwrap();
        if probe.data["spec"]["port"] == 8080 {
            break;
        }
        assert!(Instant::now() < deadline, "the API server did not call the webhook within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Warm both paths (connections, the API server's caches, the guest).
    for i in 0..20 {
        hooked_api.create(&PostParams::default(), &webapp(&format!("warm-{i}"))).await.unwrap();
        plain_api.create(&PostParams::default(), &webapp(&format!("warm-{i}"))).await.unwrap();
    }

    let (mut with, mut without) = (Vec::with_capacity(creates), Vec::with_capacity(creates));
    for i in 0..creates {
        // Alternate which goes first, so neither always follows the other.
        let order: [(&Api<DynamicObject>, bool); 2] = if i % 2 == 0 {
            [(&hooked_api, true), (&plain_api, false)]
        } else {
            [(&plain_api, false), (&hooked_api, true)]
        };
        for (api, hook) in order {
            let t = Instant::now();
            let stored = api.create(&PostParams::default(), &webapp(&format!("app-{i}"))).await.unwrap();
            let took = t.elapsed();
            assert_eq!(stored.data["spec"]["port"].is_null(), !hook, "the webhook defaults the port only in {hooked}");
            if hook { with.push(took) } else { without.push(took) }
        }
    }
    let (w50, w99, wmax) = percentiles(&mut with);
    let (o50, o99, omax) = percentiles(&mut without);

    let review = |uid: usize| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": format!("00000000-0000-0000-0000-{uid:012}"),
                "kind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
                "resource": {"group": "example.operon.dev", "version": "v1alpha1", "resource": "webapps"},
                "requestKind": {"group": "example.operon.dev", "version": "v1alpha1", "kind": "WebApp"},
                "name": "app", "namespace": hooked, "operation": "CREATE",
                "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
                "object": {
                    "apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
                    "metadata": {"name": "app", "namespace": hooked},
                    "spec": webapp("app").data["spec"]
                },
                "dryRun": false
            }
        }))
        .unwrap()
    };
    let mut handler = Vec::new();
    for hook in [Hook::Mutate, Hook::Validate] {
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls {
            let body = review(i);
            let t = Instant::now();
            let answer = webhooks.answer(hook, "bench", &body).await;
            samples.push(t.elapsed());
            assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
        }
        handler.push((hook, percentiles(&mut samples)));
    }

    println!("admission: {creates} creates per side, one at a time, alternating; {calls} in-process answers per hook");
    println!("| create round trip | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|");
    println!("| with the webhook (mutate + validate) | {w50:.2} | {w99:.2} | {wmax:.2} |");
    println!("| without | {o50:.2} | {o99:.2} | {omax:.2} |");
    println!("| ratio (with / without) | {:.2}x | {:.2}x | |", w50 / o50, w99 / o99);
    println!("| added by the webhook | {:+.2} | {:+.2} | |", w50 - o50, w99 - o99);
    println!();
    println!("| handler in-process (no TLS, no API server) | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|");
    for (hook, (p50, p99, max)) in handler {
        println!("| {} | {p50:.3} | {p99:.3} | {max:.3} |", hook.as_str());
    }
    println!("target: the webhook adds <= 2 ms p99 to a create: {}", if w99 - o99 <= 2.0 { "met" } else { "missed" });
}
