//! Software bills of materials of a release, CycloneDX 1.5 JSON, written
//! from each ecosystem's own metadata: `cargo metadata` and `Cargo.lock`
//! for the host and the Rust SDK (every package linked in, with the
//! registry's SHA-256), `go.mod`/`go.sum` for the Go SDK, the manifests of
//! the Python, TypeScript and C SDKs (which have no runtime dependencies:
//! the SBOM says so rather than being absent).
//!
//! Deterministic: the same commit gives the same bytes (the timestamp is
//! the commit's, or `SOURCE_DATE_EPOCH`'s; the serial number is derived
//! from the content).

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// One component of a bill.
struct Component {
    purl: String,
    name: String,
    version: String,
    license: Option<String>,
    sha256: Option<String>,
    properties: Vec<(String, String)>,
    depends_on: Vec<String>,
}

impl Component {
    fn json(&self, kind: &str) -> Value {
        let mut c =
            json!({"type": kind, "bom-ref": self.purl, "name": self.name, "version": self.version, "purl": self.purl});
        if let Some(l) = &self.license {
            c["licenses"] = json!([{"expression": l}]);
        }
        if let Some(h) = &self.sha256 {
            c["hashes"] = json!([{"alg": "SHA-256", "content": h}]);
        }
        if !self.properties.is_empty() {
            c["properties"] =
                self.properties.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>().into();
        }
        c
    }
}

/// The bill of `root` and its `components`.
fn bill(root: &Component, components: &[Component]) -> Result<Value> {
    let mut dependencies = vec![json!({"ref": root.purl, "dependsOn": root.depends_on})];
    dependencies.extend(components.iter().map(|c| json!({"ref": c.purl, "dependsOn": c.depends_on})));
    let mut bom = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": timestamp()?,
            "tools": {"components": [{"type": "application", "name": "cargo xtask release", "version": operon_project::sdk::VERSION}]},
            "component": root.json("application"),
        },
        "components": components.iter().map(|c| c.json("library")).collect::<Vec<_>>(),
        "dependencies": dependencies,
    });
    let digest = sha2::Sha256::digest(serde_json::to_vec(&bom)?);
    let h = hex(&digest[..16]);
    let serial = format!("urn:uuid:{}-{}-4{}-8{}-{}", &h[..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32]);
    bom["serialNumber"] = serial.into();
    Ok(bom)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 3339: `SOURCE_DATE_EPOCH`, else the commit's time.
fn timestamp() -> Result<String> {
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s,
        Err(_) => {
            let out = Command::new("git").current_dir(crate::root()).args(["log", "-1", "--format=%ct"]).output()?;
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    let secs: i64 = epoch.parse().with_context(|| format!("{epoch:?} is not seconds since the epoch"))?;
    let out = Command::new("date").args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"]).output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The bill of the Rust package `package`: every package it links
/// (normal and build dependencies, on `target` when given), from `cargo
/// metadata`, with the SHA-256 `Cargo.lock` records for registry crates.
pub fn cargo(package: &str, target: Option<&str>) -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(crate::root()).args(["metadata", "--format-version", "1", "--locked"]);
    if let Some(t) = target {
        command.args(["--filter-platform", t]);
    }
    let out = command.output().context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let metadata: Value = serde_json::from_slice(&out.stdout)?;
    let lock: toml::Value = toml::from_str(&std::fs::read_to_string(crate::root().join("Cargo.lock"))?)?;
    let mut checksums = BTreeMap::new();
    for p in lock.get("package").and_then(|p| p.as_array()).into_iter().flatten() {
        if let (Some(n), Some(v), Some(c)) = (p.get("name"), p.get("version"), p.get("checksum")) {
            checksums.insert(
                (n.as_str().unwrap_or_default().to_string(), v.as_str().unwrap_or_default().to_string()),
                c.as_str().unwrap_or_default().to_string(),
            );
        }
    }
    let packages: BTreeMap<&str, &Value> =
        metadata["packages"].as_array().into_iter().flatten().filter_map(|p| Some((p["id"].as_str()?, p))).collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root_id = packages
        .iter()
        .find(|(_, p)| p["name"] == package && p["source"].is_null())
        .map(|(id, _)| *id)
        .with_context(|| format!("{package} is not a package of the workspace"))?;
    let purl = |id: &str| {
        let p = packages[id];
        format!("pkg:cargo/{}@{}", p["name"].as_str().unwrap_or_default(), p["version"].as_str().unwrap_or_default())
    };
    // Dependencies linked in: normal and build, not dev.
    let linked = |id: &str| -> Vec<String> {
        let mut deps: Vec<String> = nodes
            .get(id)
            .and_then(|n| n["deps"].as_array())
            .into_iter()
            .flatten()
            .filter(|d| {
                d["dep_kinds"].as_array().is_some_and(|k| k.iter().any(|k| k["kind"].is_null() || k["kind"] == "build"))
            })
            .filter_map(|d| d["pkg"].as_str().map(str::to_string))
            .collect();
        deps.sort();
        deps.dedup();
        deps
    };
    let mut seen = BTreeSet::new();
    let mut todo = vec![root_id.to_string()];
    while let Some(id) = todo.pop() {
        if seen.insert(id.clone()) {
            todo.extend(linked(&id));
        }
    }
    let component = |id: &str| {
        let p = packages[id];
        let (name, version) = (p["name"].as_str().unwrap_or_default(), p["version"].as_str().unwrap_or_default());
        let mut properties = Vec::new();
        if let Some(source) = p["source"].as_str() {
            properties.push(("cargo:source".to_string(), source.to_string()));
        } else {
            properties.push(("cargo:source".to_string(), "this repository".to_string()));
        }
        Component {
            purl: purl(id),
            name: name.to_string(),
            version: version.to_string(),
            license: p["license"].as_str().map(str::to_string),
            sha256: checksums.get(&(name.to_string(), version.to_string())).cloned(),
            properties,
            depends_on: linked(id).iter().map(|d| purl(d)).collect(),
        }
    };
    let root = component(root_id);
    let mut components: Vec<Component> = seen.iter().filter(|id| *id != root_id).map(|id| component(id)).collect();
    components.sort_by(|a, b| a.purl.cmp(&b.purl));
    components.dedup_by(|a, b| a.purl == b.purl);
    bill(&root, &components)
}

/// The bill of the Go SDK: its `go.mod` requirements, with `go.sum`'s
/// hashes.
pub fn go() -> Result<Value> {
    let dir = crate::root().join("sdk/go");
    let module = std::fs::read_to_string(dir.join("go.mod"))?;
    let sums = std::fs::read_to_string(dir.join("go.sum")).unwrap_or_default();
    let mut requires = Vec::new();
    let mut block = false;
    for line in module.lines().map(str::trim) {
        let words: Vec<&str> = if block {
            if line == ")" {
                block = false;
                continue;
            }
            line.split_whitespace().collect()
        } else if line == "require (" {
            block = true;
            continue;
        } else if let Some(rest) = line.strip_prefix("require ") {
            rest.split_whitespace().collect()
        } else {
            continue;
        };
        if let [path, version, ..] = words.as_slice() {
            requires.push((path.to_string(), version.to_string()));
        }
    }
    let components: Vec<Component> = requires
        .iter()
        .map(|(path, version)| {
            let h1 = sums.lines().find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() == 3 && w[0] == path && w[1] == version).then(|| w[2].to_string())
            });
            Component {
                purl: format!("pkg:golang/{path}@{version}"),
                name: path.clone(),
                version: version.clone(),
                license: None,
                sha256: None,
                properties: h1.map(|h| vec![("go:sum".to_string(), h)]).unwrap_or_default(),
                depends_on: Vec::new(),
            }
        })
        .collect();
    let version = format!("v{}", operon_project::sdk::VERSION);
    let root = Component {
        purl: format!("pkg:golang/{}@{version}", operon_project::sdk::GO_MODULE),
        name: operon_project::sdk::GO_MODULE.to_string(),
        version,
        license: Some("Apache-2.0".into()),
        sha256: None,
        properties: Vec::new(),
        depends_on: components.iter().map(|c| c.purl.clone()).collect(),
    };
    bill(&root, &components)
}

/// The bill of an SDK package with no runtime dependencies (Python,
/// TypeScript, C): what its manifest says, checked.
pub fn standalone(purl: &str, name: &str, manifest_check: Result<()>) -> Result<Value> {
    manifest_check?;
    let root = Component {
        purl: purl.to_string(),
        name: name.to_string(),
        version: operon_project::sdk::VERSION.to_string(),
        license: Some("Apache-2.0".into()),
        sha256: None,
        properties: vec![("operon:runtime-dependencies".into(), "none".into())],
        depends_on: Vec::new(),
    };
    bill(&root, &[])
}

/// That `sdk/python/pyproject.toml` declares no runtime dependency.
pub fn python_has_no_dependencies() -> Result<()> {
    let text = std::fs::read_to_string(crate::root().join("sdk/python/pyproject.toml"))?;
    let project: toml::Value = toml::from_str(&text)?;
    let deps = project.get("project").and_then(|p| p.get("dependencies")).and_then(|d| d.as_array());
    if deps.is_some_and(|d| !d.is_empty()) {
        bail!("sdk/python declares runtime dependencies: list them in the SBOM (xtask/src/sbom.rs)");
    }
    Ok(())
}

/// That `sdk/typescript/package.json` declares no runtime dependency.
pub fn npm_has_no_dependencies() -> Result<()> {
    let text = std::fs::read_to_string(crate::root().join("sdk/typescript/package.json"))?;
    let manifest: Value = serde_json::from_str(&text)?;
    for field in ["dependencies", "peerDependencies", "optionalDependencies"] {
        if manifest[field].as_object().is_some_and(|d| !d.is_empty()) {
            bail!("sdk/typescript declares {field}: list them in the SBOM (xtask/src/sbom.rs)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's bill names what it links (wasmtime, kube) with the
    /// registry's SHA-256, and nothing only the tests use.
    #[test]
    fn the_hosts_bill_lists_what_it_links_with_their_checksums() {
        let bom = cargo("operon", Some("x86_64-unknown-linux-musl")).unwrap();
        assert_eq!((bom["bomFormat"].as_str(), bom["specVersion"].as_str()), (Some("CycloneDX"), Some("1.5")));
        let components = bom["components"].as_array().unwrap();
        let find = |name: &str| components.iter().find(|c| c["name"] == name);
        let wasmtime = find("wasmtime").expect("wasmtime is linked");
        assert_eq!(wasmtime["version"], "48.0.8");
        assert_eq!(wasmtime["hashes"][0]["content"].as_str().map(str::len), Some(64));
        assert!(find("kube-client").is_some());
        assert!(find("rust-webapp").is_none(), "a dev-dependency (the benchmarks' WebApp) is not in the bill");
        assert_eq!(cargo("operon", Some("x86_64-unknown-linux-musl")).unwrap(), bom, "deterministic");
    }
}
