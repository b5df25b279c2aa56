//! `operon explain`: the last reconciles of one parent, from what `operon
//! run --record DIR` wrote — which module version ran, the calls it made
//! outside and their answers, and which fields of its children and status
//! changed from one recorded reconcile to the next. "Why did this field
//! change, and which version did it" has an answer.

use crate::contract::egress::{Exchange, describe};
use crate::contract::fixture::{self, RequestFile};
use crate::pipeline::record::HEADER;
use crate::pipeline::shadow::field_differences;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One recorded reconcile of the parent.
struct Recorded {
    /// The recording's number (the order they were made in).
    seq: u64,
    path: PathBuf,
    /// `controller X, module sha256:…, at TIME`.
    header: String,
    request: RequestFile,
    /// The expected file: the outcome or the failure.
    answer: Value,
}

/// The text `operon explain` prints for `kind/name` (in `namespace`) from
/// the recordings under `dir`: at most `last` reconciles, oldest first.
///
/// # Errors
/// When `dir` cannot be read, or holds no recording of that parent.
pub fn explain(dir: &Path, target: &str, namespace: Option<&str>, last: usize) -> anyhow::Result<String> {
    let (kind, name) = target
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("{target:?}: name the parent as KIND/NAME (e.g. dnsrecord/www)"))?;
    let mut found = Vec::new();
    let controllers = std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    for controller in controllers.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()) {
        for case in fixture::cases_in(&controller)? {
            let Some(seq) = case.name.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()) else { continue };
            let Ok(request) = RequestFile::load(&case.path) else { continue };
            let object = &request.object;
            let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
            let kind_ok = [text("/kind").to_lowercase(), format!("{}s", text("/kind").to_lowercase())]
                .contains(&kind.to_lowercase());
            if !kind_ok
                || text("/metadata/name") != name
                || namespace.is_some_and(|ns| ns != text("/metadata/namespace"))
            {
                continue;
            }
            let header = std::fs::read_to_string(&case.path)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.strip_prefix(HEADER)).map(|h| h.trim().to_string()))
                .unwrap_or_else(|| "(not written by --record)".into());
            let answer = fixture::read::<Value>(&case.expected).unwrap_or(Value::Null);
            found.push(Recorded { seq, path: case.path.clone(), header, request, answer });
        }
    }
    if found.is_empty() {
        anyhow::bail!(
            "no recorded reconcile of {target}{} under {} (record with `operon run --record {}`)",
            namespace.map(|n| format!(" in {n}")).unwrap_or_default(),
            dir.display(),
            dir.display()
        );
    }
    found.sort_by_key(|r| r.seq);
    let total = found.len();
    let skip = total.saturating_sub(last.max(1));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{target}: {total} recorded reconciles under {}, the last {} shown (oldest first)",
        dir.display(),
        total - skip
    );
    let mut previous: Option<&Recorded> = if skip > 0 { found.get(skip - 1) } else { None };
    for r in &found[skip..] {
        let _ = writeln!(out, "\n#{}  {}", r.seq, r.header);
        let _ = writeln!(out, "  file: {}", r.path.display());
        if r.request.finalizing {
            let _ = writeln!(out, "  finalizing (the parent is being deleted)");
        }
        if r.request.attempt > 0 {
            let _ = writeln!(out, "  attempt {} after failures", r.request.attempt);
        }
        for e in &r.request.egress {
            let _ = writeln!(out, "  call: {} → {}", describe(&e.request), answered(e));
        }
        let _ = writeln!(out, "  answer: {}", summary(&r.answer));
        if let Some(before) = previous {
            let module = |h: &str| h.split("module ").nth(1).and_then(|m| m.split(',').next()).map(str::to_string);
            if module(&before.header) != module(&r.header) {
                let _ = writeln!(
                    out,
                    "  module changed: {} → {}",
                    module(&before.header).unwrap_or_default(),
                    module(&r.header).unwrap_or_default()
                );
            }
            let changes = changes(&before.answer, &r.answer);
            if changes.is_empty() {
                let _ = writeln!(out, "  changed: nothing since #{}", before.seq);
            } else {
                let _ = writeln!(out, "  changed since #{}:", before.seq);
                for c in changes.iter().take(40) {
                    let _ = writeln!(out, "    {c}");
                }
                if changes.len() > 40 {
                    let _ = writeln!(out, "    … and {} more", changes.len() - 40);
                }
            }
        }
        previous = Some(r);
    }
    Ok(out)
}

fn answered(e: &Exchange) -> String {
    match (&e.response, &e.error) {
        (_, Some(err)) => err.to_string(),
        (Some(r), None) => format!("{} ({} bytes)", r.status, r.body.len()),
        (None, None) => "?".into(),
    }
}

/// One line on what a reconcile answered.
fn summary(answer: &Value) -> String {
    if let Some(error) = answer.get("error") {
        return format!("failed: {}", serde_json::to_string(error).unwrap_or_default());
    }
    let children = answer["desired"].as_array().map_or(0, Vec::len);
    let status = if answer["status"].is_null() { "status left alone" } else { "status written" };
    let requeue = answer["requeueAfterMs"].as_u64().map(|ms| format!(", requeue after {ms} ms")).unwrap_or_default();
    let finalized = if answer["finalized"] == Value::Bool(true) { ", finalized" } else { "" };
    format!("{children} children, {status}{requeue}{finalized}")
}

/// Which fields of which children, and of the status, changed between two
/// recorded answers.
fn changes(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let key = |v: &Value| {
        format!(
            "{} {}",
            v["kind"].as_str().unwrap_or("?"),
            v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?")
        )
    };
    let empty = Vec::new();
    let a = before["desired"].as_array().unwrap_or(&empty);
    let b = after["desired"].as_array().unwrap_or(&empty);
    for x in a {
        match b.iter().find(|y| key(y) == key(x)) {
            Some(y) => field_differences(&key(x), x, y, ("removed", "added"), &mut out),
            None => out.push(format!("{}: no longer wanted (deleted)", key(x))),
        }
    }
    for y in b {
        if !a.iter().any(|x| key(x) == key(y)) {
            out.push(format!("{}: new", key(y)));
        }
    }
    // A status left alone (null) is not a change of the status.
    if !after["status"].is_null() {
        field_differences("status", &before["status"], &after["status"], ("removed", "added"), &mut out);
    }
    for field in ["error", "events", "requeueAfterMs", "finalized", "needsFinalizer", "parentMetadata"] {
        field_differences(field, &before[field], &after[field], ("removed", "added"), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_should_show_the_calls_the_module_and_what_changed_between_reconciles() {
        let dir = tempfile::tempdir().unwrap();
        let controller = dir.path().join("dns_dnsrecord");
        std::fs::create_dir_all(&controller).unwrap();
        let request = |n: u32, records: &str, digest: &str| {
            let text = format!(
                "{HEADER} controller dns/dnsrecord, module {digest}, at 2026-11-26T10:0{n}:00.000Z\n\
                 object: {{apiVersion: dns.example.operon.dev/v1alpha1, kind: DnsRecord, metadata: {{name: www, namespace: dns}}, spec: {{records: [{records}]}}}}\n\
                 egress:\n- request: {{method: PATCH, url: 'http://127.0.0.1:8081/api/v1/servers/localhost/zones/a.', credential: pdns, body: 'x'}}\n  response: {{status: 204}}\n"
            );
            std::fs::write(controller.join(format!("dns.www-00000{n}.yaml")), text).unwrap();
            let expected = format!(
                "desired: [{{apiVersion: v1, kind: ConfigMap, metadata: {{name: www}}, data: {{records: '{records}'}}}}]\n\
                 status: {{ready: true, records: '{records}'}}\nrequeueAfterMs: 300000\n"
            );
            std::fs::write(controller.join(format!("dns.www-00000{n}.expected.yaml")), expected).unwrap();
        };
        request(1, "192.0.2.1", "sha256:aaaa");
        request(2, "192.0.2.9", "sha256:bbbb");
        let text = explain(dir.path(), "dnsrecord/www", Some("dns"), 10).unwrap();
        assert!(text.contains("2 recorded reconciles"), "{text}");
        assert!(text.contains("call: PATCH http://127.0.0.1:8081/api/v1/servers/localhost/zones/a. (1 bytes of body) with credential \"pdns\" → 204"), "{text}");
        assert!(text.contains("module changed: sha256:aaaa → sha256:bbbb"), "{text}");
        assert!(text.contains("ConfigMap www.data.records: \"192.0.2.1\" → \"192.0.2.9\""), "{text}");
        assert!(text.contains("status.records: \"192.0.2.1\" → \"192.0.2.9\""), "{text}");
        assert!(
            explain(dir.path(), "dnsrecord/other", None, 10).unwrap_err().to_string().contains("no recorded reconcile")
        );
        assert!(explain(dir.path(), "www", None, 10).is_err());
    }
}
