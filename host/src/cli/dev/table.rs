//! The live status of `operon dev`, read back from the API server (not
//! from the host's memory, so it shows what `kubectl` would): each
//! Reconciler's status, each parent's Ready condition and children, and
//! the Kubernetes events of the dev namespaces as they arrive.

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
}

/// One Reconciler's row.
pub(crate) struct ReconcilerRow {
    name: String,
    ready: String,
    digest: String,
    reconciles: u64,
    errors: u64,
    message: String,
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
        Status { client, loaded, resources: HashMap::new(), seen_events: HashSet::new(), recent: HashMap::new() }
    }

    /// Read everything, print new events and the table.
    pub(crate) async fn refresh(&mut self, ui: &Ui) -> anyhow::Result<Snapshot> {
        let snapshot = self.read().await;
        self.events(ui).await;
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
            let row = match api.get_opt(name).await? {
                Some(r) => {
                    let status = r.status.unwrap_or_default();
                    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
                    ReconcilerRow {
                        name: format!("{ns}/{name}"),
                        ready: ready.map_or("-".into(), |c| c.status.clone()),
                        digest: status.short_digest.unwrap_or_else(|| "-".into()),
                        reconciles: status.reconciles,
                        errors: status.errors,
                        message: ready
                            .filter(|c| c.status != "True")
                            .map(|c| format!("{}: {}", c.reason, c.message))
                            .unwrap_or_default(),
                    }
                }
                None => ReconcilerRow {
                    name: format!("{ns}/{name}"),
                    ready: "-".into(),
                    digest: "-".into(),
                    reconciles: 0,
                    errors: 0,
                    message: "not found".into(),
                },
            };
            snapshot.reconcilers.push(row);
            snapshot.samples.extend(l.samples.iter().map(|s| (ns.clone(), s.clone())));

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
                snapshot.parents.push(ParentRow {
                    namespace: ns.clone(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    kind: l.manifest.for_kind.kind.clone(),
                    ready: ready.map_or("-".into(), |c| field(c, "status")),
                    children,
                    message: ready
                        .filter(|c| field(c, "status") != "True")
                        .map(|c| format!("{}: {}", field(c, "reason"), field(c, "message")))
                        .unwrap_or_default(),
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

    /// The recent events of a namespace, for a failure report.
    pub(crate) fn recent_events(&self, ns: &str) -> Vec<String> {
        self.recent.get(ns).map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }
}

impl Snapshot {
    /// Every Reconciler is Ready, and every sample parent exists and is Ready.
    pub(crate) fn all_ready(&self) -> bool {
        self.reconcilers.iter().all(|r| r.ready == "True")
            && self.samples.iter().all(|(ns, name)| {
                self.parents.iter().any(|p| &p.namespace == ns && &p.name == name && p.ready == "True")
            })
    }

    /// One line naming what is Ready.
    pub(crate) fn summary(&self) -> String {
        let reconcilers: Vec<&str> = self.reconcilers.iter().map(|r| r.name.as_str()).collect();
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
            "{:width$}  {:5}  {:14}  {:>10}  {:>6}  MESSAGE",
            "RECONCILER", "READY", "DIGEST", "RECONCILES", "ERRORS"
        )];
        let mut key = vec!["RECONCILERS".to_string()];
        for r in &self.reconcilers {
            lines.push(format!(
                "{:width$}  {:5}  {:14}  {:>10}  {:>6}  {}",
                r.name, r.ready, r.digest, r.reconciles, r.errors, r.message
            ));
            key.push(format!("{} {} {} {}", r.name, r.ready, r.digest, r.message));
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
