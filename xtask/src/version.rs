//! `cargo xtask version [X.Y.Z]`: the release's one version, and every
//! place that must repeat it.
//!
//! The version is `[workspace.package] version` of the root `Cargo.toml`.
//! Package manifests that cannot inherit it (the Python, npm, Go and C
//! SDKs, the Helm chart, the kustomize image tag) carry copies; without an
//! argument this task lists them, with one it rewrites every copy (and
//! `Cargo.lock`). A test fails when a copy differs, or when the version's
//! minor is not the WIT contract's.

use anyhow::{Context, Result, bail};
use std::path::Path;

/// One copy: the file, and the text just before the version on its line
/// (leading whitespace ignored); `nth` counts matching lines from 0.
struct Slot {
    file: &'static str,
    prefix: &'static str,
    nth: usize,
}

const fn slot(file: &'static str, prefix: &'static str) -> Slot {
    Slot { file, prefix, nth: 0 }
}

/// Every place the version is written. The first is the source.
const SLOTS: &[Slot] = &[
    slot("Cargo.toml", "version = \""),
    slot("Cargo.toml", "operon-sdk = { path = \"sdk\", version = \""),
    slot("Cargo.toml", "operon-contract = { path = \"contract\", version = \""),
    slot("sdk/python/operon_sdk/__init__.py", "__version__ = \""),
    slot("sdk/typescript/package.json", "\"version\": \""),
    slot("sdk/typescript/package-lock.json", "\"version\": \""),
    Slot { file: "sdk/typescript/package-lock.json", prefix: "\"version\": \"", nth: 1 },
    // The example links the SDK (`file:../../sdk/typescript`): its lock records the SDK's version, and
    // `npm install` rewrites a stale one (a tracked file changed by every build).
    Slot { file: "guest-examples/ts-webapp/package-lock.json", prefix: "\"version\": \"", nth: 2 },
    slot("sdk/go/operon.go", "const Version = \""),
    slot("sdk/c/operon.h", "#define OPERON_SDK_VERSION \""),
    slot("deploy/helm/operon/Chart.yaml", "version: "),
    slot("deploy/helm/operon/Chart.yaml", "appVersion: \""),
    slot("deploy/kustomize/kustomization.yaml", "newTag: "),
    slot("deploy/kustomize/operon.yaml", "image: ghcr.io/operon-dev/operon:"),
];

/// Where `slot`'s version is in `text`: the byte range.
fn find(text: &str, slot: &Slot) -> Option<std::ops::Range<usize>> {
    let mut offset = 0;
    let mut seen = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(slot.prefix) {
            if seen == slot.nth {
                let start = offset + (line.len() - trimmed.len()) + slot.prefix.len();
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
                    .unwrap_or(rest.len());
                return Some(start..start + len);
            }
            seen += 1;
        }
        offset += line.len();
    }
    None
}

/// Every slot with the version it holds.
fn read(root: &Path) -> Result<Vec<(&'static Slot, String)>> {
    SLOTS
        .iter()
        .map(|slot| {
            let path = root.join(slot.file);
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let range = find(&text, slot)
                .with_context(|| format!("{}: no line with `{}`{}", slot.file, slot.prefix, nth_hint(slot)))?;
            Ok((slot, text[range].to_string()))
        })
        .collect()
}

fn nth_hint(slot: &Slot) -> String {
    if slot.nth == 0 { String::new() } else { format!(" (occurrence {})", slot.nth + 1) }
}

/// The differences from the source version, and whether it speaks the
/// contract; empty when all is well.
fn problems(found: &[(&Slot, String)]) -> Vec<String> {
    let source = &found[0].1;
    let mut out: Vec<String> = found
        .iter()
        .filter(|(_, v)| v != source)
        .map(|(slot, v)| {
            format!("{} says {v} where `{}`{}: Cargo.toml says {source}", slot.file, slot.prefix, nth_hint(slot))
        })
        .collect();
    if !operon_project::sdk::speaks_contract(source) {
        out.push(format!(
            "{source} does not speak the WIT contract {}@{} (the release's minor must be the contract's)",
            operon_contract_name(),
            wit_version()
        ));
    }
    out
}

fn operon_contract_name() -> &'static str {
    "operon:reconciler"
}

fn wit_version() -> String {
    let wit = operon_project::WIT;
    wit.lines()
        .find_map(|l| l.trim().strip_prefix("package operon:reconciler@"))
        .map(|v| v.trim_end_matches(';').to_string())
        .unwrap_or_default()
}

pub fn run(args: &[&str]) -> Result<()> {
    let root = crate::root();
    match args {
        [] => {
            let found = read(&root)?;
            for (slot, version) in &found {
                println!("{version:<10} {} ({}{})", slot.file, slot.prefix.trim_end_matches('"'), nth_hint(slot));
            }
            println!("WIT contract: {}@{}", operon_contract_name(), wit_version());
            let problems = problems(&found);
            if !problems.is_empty() {
                bail!("the copies disagree:\n{}\n(set them all with `cargo xtask version X.Y.Z`)", problems.join("\n"));
            }
            Ok(())
        }
        [new] => set(&root, new),
        _ => bail!("usage: cargo xtask version [X.Y.Z]"),
    }
}

fn set(root: &Path, new: &str) -> Result<()> {
    let valid = new.split('.').count() == 3 && new.split(['.', '-', '+']).take(3).all(|p| p.parse::<u64>().is_ok());
    if !valid {
        bail!("{new:?} is not a version X.Y.Z");
    }
    if !operon_project::sdk::speaks_contract(new) {
        bail!(
            "{new} would not speak the WIT contract {}@{}: change wit/reconciler.wit's version (and operon_contract::WIT_VERSION) first, or keep the minor",
            operon_contract_name(),
            wit_version()
        );
    }
    // Rewrite from the last slot of a file to the first, so earlier ranges hold.
    for slot in SLOTS.iter().rev() {
        let path = root.join(slot.file);
        let mut text = std::fs::read_to_string(&path)?;
        let range = find(&text, slot).with_context(|| format!("{}: no line with `{}`", slot.file, slot.prefix))?;
        text.replace_range(range, new);
        std::fs::write(&path, text)?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo).current_dir(root).args(["update", "--workspace"]).status()?;
    if !status.success() {
        bail!("cargo update --workspace failed ({status})");
    }
    let found = read(root)?;
    let problems = problems(&found);
    if !problems.is_empty() {
        bail!("after the rewrite:\n{}", problems.join("\n"));
    }
    println!(
        "every copy says {new}; release: commit, tag v{new} and sdk/go/v{new} (the Go module's tag), then publish (docs/releasing.md)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_copy_of_the_version_should_be_the_workspace_version_and_speak_the_contract() {
        let found = read(&crate::root()).unwrap();
        let problems = problems(&found);
        assert!(problems.is_empty(), "{}\nrun `cargo xtask version {}`", problems.join("\n"), found[0].1);
    }

    /// Nothing of a release is published yet (docs/releasing.md): no
    /// command a reader copies from the docs may fetch an Operon package,
    /// image or chart from a public registry.
    #[test]
    fn no_doc_command_should_fetch_what_is_not_published() {
        const FETCHES: [&str; 8] = [
            "oci://ghcr.io/operon-dev",
            "ghcr.io/operon-dev/operon:",
            "pip install operon-sdk",
            "pip install 'operon-sdk",
            "npm install @operon/sdk",
            "cargo add operon-sdk",
            "go get operon.dev/sdk",
            "cargo install --git",
        ];
        let root = crate::root();
        let mut docs = vec![root.join("README.md")];
        let mut dirs = vec![root.join("docs"), root.join("sdk"), root.join("guest-examples")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() && !matches!(name.as_str(), "node_modules" | "reference" | "target") {
                    dirs.push(path);
                } else if name.ends_with(".md") {
                    docs.push(path);
                }
            }
        }
        let mut found = Vec::new();
        for doc in docs {
            let text = std::fs::read_to_string(&doc).unwrap();
            let mut in_code = false;
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("```") {
                    in_code = !in_code;
                } else if in_code && FETCHES.iter().any(|f| line.contains(f)) {
                    found.push(format!("{}:{}: {line}", doc.strip_prefix(&root).unwrap().display(), n + 1));
                }
            }
        }
        assert!(found.is_empty(), "these commands fetch what no release has published:\n{}", found.join("\n"));
    }

    #[test]
    fn a_slot_should_find_its_nth_line_and_only_the_version() {
        let text = "a\n  \"version\": \"1.2.3\",\n  \"x\": {\n    \"version\": \"9.9.9-rc.1\"\n";
        let first = find(text, &slot("f", "\"version\": \"")).unwrap();
        assert_eq!(&text[first], "1.2.3");
        let second = find(text, &Slot { file: "f", prefix: "\"version\": \"", nth: 1 }).unwrap();
        assert_eq!(&text[second], "9.9.9-rc.1");
        assert!(find(text, &Slot { file: "f", prefix: "\"version\": \"", nth: 2 }).is_none());
    }
}
