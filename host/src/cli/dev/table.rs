//! The live status of `operon dev`, read back from the API server (not
//! from the host's memory, so it shows what `kubectl` would): each
//! Reconciler's status (Ready, and Degraded with its reason: a rollback
//! shows there), each parent's Ready condition and children, and the
//! Kubernetes events of the dev namespaces as they arrive. Objects of a
//! loaded kind in a namespace where no Reconciler acts are named once, with
//! the namespace that would act.

use super::{Loaded, Ui};
use crate::contract::Gvk;
use crate::reconciler::crd::Reconciler;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// How many recent events per namespace are kept for a failure report.
const RECENT_EVENTS: usize = 8;

/// Reads the status; remembers which events were shown.
pub(crate) struct Status {
    client: kube::Client,
    loaded: Arc<Vec<Loaded>>,
    /// Served API resources by kind (`None`: not served).
    resources: HashMap<Gvk, Option<ApiResource>>,
    seen_events: HashSet<String>,
    recent: HashMap<String, VecDeque<String>>,
    /// Objects already reported as outside every dev namespace (uids).
    strays: HashSet<String>,
}

/// One Reconciler's row.
pub(crate) struct ReconcilerRow {
    name: String,
    ready: String,
    /// The Degraded condition's status.
    degraded: String,
    digest: String,
    reconciles: u64,
    errors: u64,
    message: String,
    /// Held back (its fixtures fail): not expected to be Ready.
    held: bool,
}

impl ReconcilerRow {
    /// The row of a Reconciler that is not in the cluster.
    fn absent(name: String, message: String) -> ReconcilerRow {
        let dash = || "-".to_string();
        ReconcilerRow {
            name,
            ready: dash(),
            degraded: dash(),
            digest: dash(),
            reconciles: 0,
            errors: 0,
            message,
            held: false,
        }
    }
}

/// One parent's row.
pub(crate) struct ParentRow {
    namespace: String,
    name: String,
    kind: String,
    ready: String,
    children: usize,
    message: String,
    conditions: Vec<String>,
}

/// What one look at the cluster found.
pub(crate) struct Snapshot {
    reconcilers: Vec<ReconcilerRow>,
    parents: Vec<ParentRow>,
    /// Sample parents (namespace, name) expected, found or not.
    samples: Vec<(String, String)>,
}

impl Status {
    pub(crate) fn new(client: kube::Client, loaded: Arc<Vec<Loaded>>) -> Status {
        Status {
            client,
            loaded,
            resources: HashMap::new(),
            seen_events: HashSet::new(),
            recent: HashMap::new(),
            strays: HashSet::new(),
        }
    }

    /// Read everything, print new events and the table.
    pub(crate) async fn refresh(&mut self, ui: &Ui) -> anyhow::Result<Snapshot> {
        let snapshot = self.read().await;
        self.events(ui).await;
        self.strays(ui).await;
        let snapshot = snapshot?;
        let (lines, key) = snapshot.render();
        ui.table(lines, key);
        Ok(snapshot)
    }

    async fn resource(&mut self, gvk: &Gvk) -> Option<ApiResource> {
        if let Some(found) = self.resources.get(gvk) {
            return found.clone();
        }
        let key = kube::api::GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let found = kube::discovery::pinned_kind(&self.client, &key).await.ok().map(|(ar, _)| ar);
        // A kind that is not served may be installed later: ask again then.
        if found.is_some() {
            self.resources.insert(gvk.clone(), found.clone());
        }
        found
    }

    async fn read(&mut self) -> anyhow::Result<Snapshot> {
        let mut snapshot = Snapshot { reconcilers: Vec::new(), parents: Vec::new(), samples: Vec::new() };
        let loaded = self.loaded.clone();
        for l in loaded.iter() {
            let ns = &l.namespace;
            let api: Api<Reconciler> = Api::namespaced(self.client.clone(), ns);
            let name = l.project.name();
            let row = match (l.held(), api.get_opt(name).await?) {
                (Some(why), _) => ReconcilerRow {
                    held: true,
                    ..ReconcilerRow::absent(
                        format!("{ns}/{name}"),
                        format!("not loaded: {why} (fix them: it loads when they pass)"),
                    )
                },
                (None, Some(r)) => {
                    let status = r.status.unwrap_or_default();
                    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
                    let degraded = status.conditions.iter().find(|c| c.type_ == "Degraded");
                    let problem = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
                        format!("{}: {}", c.reason, c.message)
                    };
                    ReconcilerRow {
                        name: format!("{ns}/{name}"),
                        ready: ready.map_or("-".into(), |c| c.status.clone()),
                        degraded: degraded.map_or("-".into(), |c| c.status.clone()),
                        digest: status.short_digest.unwrap_or_else(|| "-".into()),
                        reconciles: status.reconciles,
                        errors: status.errors,
                        // Not Ready says why; Ready but Degraded (a rollback,
                        // failing reconciles) says that.
                        message: ready
                            .filter(|c| c.status != "True")
                            .or(degraded.filter(|c| c.status == "True"))
                            .map(problem)
                            .unwrap_or_default(),
                        held: false,
                    }
                }
                (None, None) => ReconcilerRow::absent(format!("{ns}/{name}"), "not found".into()),
            };
            snapshot.reconcilers.push(row);
            snapshot.samples.extend(l.samples().into_iter().map(|s| (ns.clone(), s)));

            let Some(parent_ar) = self.resource(&l.manifest.for_kind).await else { continue };
            let mut owned = Vec::new();
            for kind in &l.manifest.owns {
                if let Some(ar) = self.resource(kind).await {
                    let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
                    owned.extend(api.list(&ListParams::default()).await?.items);
                }
            }
            let parents: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &parent_ar);
            for p in parents.list(&ListParams::default()).await?.items {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                let children =
                    owned.iter().filter(|c| c.metadata.owner_references.iter().flatten().any(|o| o.uid == uid)).count();
                let conditions: Vec<Value> =
                    p.data.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
                let field = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                let ready = conditions.iter().find(|c| field(c, "type") == "Ready");
                // Without a Ready condition, a status that observed the
                // current generation counts (as kstatus reads it).
                let observed = p.data.pointer("/status/observedGeneration").and_then(Value::as_i64);
                let current = ready.is_none() && observed.is_some() && observed == p.metadata.generation;
                snapshot.parents.push(ParentRow {
                    namespace: ns.clone(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    kind: l.manifest.for_kind.kind.clone(),
                    ready: match ready {
                        Some(c) => field(c, "status"),
                        None if current => "True".into(),
                        None => "-".into(),
                    },
                    children,
                    message: match ready {
                        Some(c) if field(c, "status") != "True" => {
                            format!("{}: {}", field(c, "reason"), field(c, "message"))
                        }
                        None if current => "no Ready condition; the status observed the current generation".into(),
                        None if observed.is_some() => format!(
                            "no Ready condition; the status observed generation {} of {}",
                            observed.unwrap_or_default(),
                            p.metadata.generation.unwrap_or_default()
                        ),
                        _ => String::new(),
                    },
                    conditions: conditions
                        .iter()
                        .map(|c| {
                            format!(
                                "{}={} ({}: {})",
                                field(c, "type"),
                                field(c, "status"),
                                field(c, "reason"),
                                field(c, "message")
                            )
                        })
                        .collect(),
                });
            }
        }
        Ok(snapshot)
    }

    /// Print the events not shown yet, oldest first.
    async fn events(&mut self, ui: &Ui) {
        let namespaces: Vec<String> = self.loaded.iter().map(|l| l.namespace.clone()).collect();
        for ns in namespaces {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            let Ok(list) = api.list(&ListParams::default()).await else { continue };
            let mut fresh: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| e.metadata.uid.as_ref().is_some_and(|uid| !self.seen_events.contains(uid)))
                .collect();
            fresh.sort_by_key(|e| {
                e.event_time.as_ref().map(|t| t.0).or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
            });
            for e in fresh {
                self.seen_events.insert(e.metadata.uid.clone().unwrap_or_default());
                let regarding = e
                    .regarding
                    .as_ref()
                    .map(|r| format!("{}/{}", r.kind.as_deref().unwrap_or("?"), r.name.as_deref().unwrap_or("?")))
                    .unwrap_or_default();
                let text = format!(
                    "{} {} {regarding}: {}",
                    e.type_.as_deref().unwrap_or("Normal"),
                    e.reason.as_deref().unwrap_or(""),
                    e.note.as_deref().unwrap_or("")
                );
                ui.line(format!("event {ns}: {text}"));
                let recent = self.recent.entry(ns.clone()).or_default();
                recent.push_back(text);
                if recent.len() > RECENT_EVENTS {
                    recent.pop_front();
                }
            }
        }
    }

    /// Name, once each, the objects of a loaded kind in a namespace where no
    /// dev Reconciler acts (a parent applied without `-n` lands in
    /// `default`, where nothing reconciles it).
    async fn strays(&mut self, ui: &Ui) {
        let loaded = self.loaded.clone();
        let mut kinds: Vec<&Gvk> = loaded.iter().map(|l| &l.manifest.for_kind).collect();
        kinds.dedup();
        for kind in kinds {
            let Some(ar) = self.resource(kind).await else { continue };
            let acting: Vec<&Loaded> =
                loaded.iter().filter(|l| &l.manifest.for_kind == kind && l.held().is_none()).collect();
            if acting.is_empty() {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
            let Ok(list) = api.list(&ListParams::default()).await else { continue };
            for o in list.items {
                let ns = o.metadata.namespace.clone().unwrap_or_default();
                let uid = o.metadata.uid.clone().unwrap_or_default();
                if acting.iter().any(|l| l.namespace == ns) || !self.strays.insert(uid) {
                    continue;
                }
                let name = o.metadata.name.clone().unwrap_or_default();
                let (where_, apply) = match acting.as_slice() {
                    [one] => (
                        format!("the {} Reconciler acts in {} only", one.project.name(), one.namespace),
                        one.namespace.clone(),
                    ),
                    many => (
                        format!(
                            "Reconcilers of {} act in {} only",
                            kind.kind,
                            many.iter().map(|l| l.namespace.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                        many[0].namespace.clone(),
                    ),
                };
                ui.line(format!(
                    "⚠ {} {ns}/{name} is in namespace {ns}, where no Reconciler acts: {where_}; \
                     apply it there (kubectl apply -n {apply} -f …)",
                    kind.kind
                ));
            }
        }
    }

    /// The recent events of a namespace, for a failure report.
    pub(crate) fn recent_events(&self, ns: &str) -> Vec<String> {
        self.recent.get(ns).map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }
}

impl Snapshot {
    /// Every Reconciler is Ready, and every sample parent exists and is Ready.
    pub(crate) fn all_ready(&self) -> bool {
        self.reconcilers.iter().filter(|r| !r.held).all(|r| r.ready == "True")
            && self.samples.iter().all(|(ns, name)| {
                self.parents.iter().any(|p| &p.namespace == ns && &p.name == name && p.ready == "True")
            })
    }

    /// One line naming what is Ready.
    pub(crate) fn summary(&self) -> String {
        let reconcilers: Vec<&str> = self.reconcilers.iter().filter(|r| !r.held).map(|r| r.name.as_str()).collect();
        let parents: Vec<String> = self.samples.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
        format!(
            "{} Reconcilers Ready ({}); {} parents Ready ({})",
            reconcilers.len(),
            reconcilers.join(", "),
            parents.len(),
            parents.join(", ")
        )
    }

    /// What is not Ready, with conditions and recent events.
    pub(crate) fn why_not_ready(&self, status: &Status) -> String {
        let mut out = Vec::new();
        for r in self.reconcilers.iter().filter(|r| r.ready != "True") {
            out.push(format!("  Reconciler {} is not Ready (Ready={}): {}", r.name, r.ready, r.message));
        }
        for r in self.reconcilers.iter().filter(|r| r.ready == "True" && r.degraded == "True") {
            out.push(format!("  Reconciler {} is Degraded: {}", r.name, r.message));
        }
        let mut namespaces = Vec::new();
        for (ns, name) in &self.samples {
            match self.parents.iter().find(|p| &p.namespace == ns && &p.name == name) {
                Some(p) if p.ready == "True" => continue,
                Some(p) => {
                    let conditions =
                        if p.conditions.is_empty() { "no conditions".to_string() } else { p.conditions.join("; ") };
                    out.push(format!("  {} {ns}/{name} is not Ready: {conditions}", p.kind));
                }
                None => out.push(format!("  {ns}/{name} does not exist")),
            }
            if !namespaces.contains(ns) {
                namespaces.push(ns.clone());
            }
        }
        for r in self.reconcilers.iter().filter(|r| r.ready != "True") {
            if let Some((ns, _)) = r.name.split_once('/')
                && !namespaces.iter().any(|n| n == ns)
            {
                namespaces.push(ns.to_string());
            }
        }
        for ns in namespaces {
            let events = status.recent_events(&ns);
            if events.is_empty() {
                out.push(format!("  no events in {ns}"));
            } else {
                out.push(format!("  last events in {ns}:"));
                out.extend(events.into_iter().map(|e| format!("    {e}")));
            }
        }
        out.join("\n")
    }

    /// The table's lines, and the same without counters (see [`Ui::table`]).
    fn render(&self) -> (Vec<String>, Vec<String>) {
        let width = self
            .reconcilers
            .iter()
            .map(|r| r.name.len())
            .chain(self.parents.iter().map(|p| p.namespace.len() + p.name.len() + 1))
            .max()
            .unwrap_or(0)
            .max(10);
        let mut lines = vec![format!(
            "{:width$}  {:5}  {:8}  {:14}  {:>10}  {:>6}  MESSAGE",
            "RECONCILER", "READY", "DEGRADED", "DIGEST", "RECONCILES", "ERRORS"
        )];
        let mut key = vec!["RECONCILERS".to_string()];
        for r in &self.reconcilers {
            lines.push(format!(
                "{:width$}  {:5}  {:8}  {:14}  {:>10}  {:>6}  {}",
                r.name, r.ready, r.degraded, r.digest, r.reconciles, r.errors, r.message
            ));
            key.push(format!("{} {} {} {} {}", r.name, r.ready, r.degraded, r.digest, r.message));
        }
        lines.push(format!("{:width$}  {:5}  {:>8}  KIND, MESSAGE", "PARENT", "READY", "CHILDREN"));
        key.push("PARENTS".into());
        for p in &self.parents {
            let name = format!("{}/{}", p.namespace, p.name);
            lines.push(format!("{name:width$}  {:5}  {:>8}  {} {}", p.ready, p.children, p.kind, p.message));
            key.push(format!("{name} {} {} {}", p.ready, p.children, p.message));
        }
        (lines, key)
    }
}
