//! Every knob a message names must exist.
//!
//! A refusal that says "raise spec.limits.maxOutput" or "(--max-module-size)"
//! sends its reader to a field or a flag; if there is none, the reader is
//! stuck. This test reads the host's own messages — every string literal of
//! the host, its runtime and the contract crate outside their tests (error
//! `Display` strings, log and status messages, flag help) and the published
//! `docs/reference/troubleshooting.md` — finds each `spec.…` path and each
//! `--flag`, and checks the path against the Reconciler CRD's schema and the
//! flag against the command line (`Cli::command()`, every subcommand).

use super::Cli;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Flags of other programs that messages quote on purpose (a command to
/// copy), with the program, so this list is read as what it is.
const FOREIGN_FLAGS: &[(&str, &str)] = &[
    ("from-file", "kubectl create configmap"),
    ("from-literal", "kubectl create configmap"),
    ("dry-run", "kubectl"),
    ("namespace", "kubectl"),
    ("target", "cargo build, rustup"),
    ("release", "cargo build"),
    ("manifest-path", "cargo"),
    ("package", "cargo"),
    ("lib", "cargo"),
    ("locked", "cargo"),
    ("offline", "cargo"),
    ("adapt", "wasm-tools component new"),
    ("stub-wasi", "componentize-py"),
    ("wit-path", "componentize-py, componentize-js"),
    ("world", "componentize-py, wit-bindgen"),
    ("world-name", "componentize-js"),
    ("out-dir", "wit-bindgen"),
    ("user", "pip install"),
    ("find-links", "pip install"),
    ("no-index", "pip install"),
    ("upgrade", "pip install"),
    ("save-dev", "npm install"),
    ("registry", "npm"),
    ("sysroot", "clang"),
    ("color", "tools that colour their output"),
    ("version", "every tool"),
];

/// Sources whose messages name fields of objects other than Reconcilers:
/// the readiness rules (workloads' specs) and the contract's manifest
/// checks (a guest parent's fields).
const OTHER_OBJECTS: &[&str] = &["contract/src/readiness.rs", "contract/src/types.rs"];

#[test]
fn every_field_and_flag_a_message_names_should_exist() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut texts: Vec<(String, String)> = Vec::new();
    for dir in ["src", "runtime/src", "../contract/src"] {
        let files = rust_files(&root.join(dir));
        let test_only = test_only_modules(&files);
        // Messages about other objects' fields (a Deployment's
        // spec.replicas, a guest's parent's spec.configRef), not Reconcilers'.
        let other_objects = |f: &PathBuf| OTHER_OBJECTS.iter().any(|o| f.ends_with(o));
        for file in files.into_iter().filter(|f| !test_only.contains(f) && !other_objects(f)) {
            let source = std::fs::read_to_string(&file).unwrap();
            let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
            texts.extend(string_literals(outside_tests(&source)).into_iter().map(|s| (name.clone(), s)));
        }
    }
    let troubleshooting = root.join("../docs/reference/troubleshooting.md");
    texts.push(("docs/reference/troubleshooting.md".into(), std::fs::read_to_string(&troubleshooting).unwrap()));
    assert!(texts.len() > 500, "the scan found only {} strings: it is not reading the sources", texts.len());

    let schema = reconciler_spec_schema();
    let flags = cli_flags();
    let foreign: BTreeSet<&str> = FOREIGN_FLAGS.iter().map(|(f, _)| *f).collect();
    let mut unknown = BTreeSet::new();
    let (mut fields_seen, mut flags_seen) = (0, 0);
    for (file, text) in &texts {
        for path in spec_paths(text) {
            fields_seen += 1;
            if !schema_has(&schema, &path) {
                unknown.insert(format!("{file}: spec.{} is not a field of the Reconciler CRD", path.join(".")));
            }
        }
        for flag in flag_names(text) {
            flags_seen += 1;
            if !flags.contains(&flag) && !foreign.contains(flag.as_str()) {
                unknown.insert(format!("{file}: --{flag} is not a flag of operon (Cli::command())"));
            }
        }
    }
    // A scan that finds nothing proves nothing.
    assert!(fields_seen > 20 && flags_seen > 20, "found {fields_seen} spec paths and {flags_seen} flags");
    assert!(unknown.is_empty(), "messages name knobs that do not exist:\n  {}", Vec::from_iter(unknown).join("\n  "));
}

/// The OpenAPI schema of the Reconciler's `spec`.
fn reconciler_spec_schema() -> serde_json::Value {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(crate::reconciler::crd::Reconciler::crd()).unwrap();
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec").cloned().expect("the CRD has a spec")
}

/// Whether `path` (below `spec`) is a field of `schema`.
fn schema_has(schema: &serde_json::Value, path: &[String]) -> bool {
    let mut at = schema;
    for segment in path {
        while let Some(items) = at.get("items") {
            at = items;
        }
        match at.pointer(&format!("/properties/{segment}")) {
            Some(next) => at = next,
            None => return at.get("additionalProperties").is_some_and(|a| a != false),
        }
    }
    true
}

/// Every long flag (and alias) of every subcommand.
fn cli_flags() -> BTreeSet<String> {
    fn walk(command: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            out.extend(arg.get_long().map(str::to_string));
            out.extend(arg.get_all_aliases().into_iter().flatten().map(str::to_string));
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    let mut out = BTreeSet::from(["help".to_string(), "version".to_string()]);
    walk(&command, &mut out);
    out
}

/// `spec.a.b` in `text` (not `x.spec.a`: a CEL or JSON path of another
/// object), as its segments below `spec`.
fn spec_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("spec.") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 5..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '_' || c == '/') {
            continue;
        }
        let mut segments = Vec::new();
        let mut tail = after;
        loop {
            let end = tail.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(tail.len());
            if end == 0 || !tail.starts_with(|c: char| c.is_ascii_alphabetic()) {
                break;
            }
            segments.push(tail[..end].to_string());
            tail = &tail[end..];
            match tail.strip_prefix('.') {
                Some(t) if t.starts_with(|c: char| c.is_ascii_alphabetic()) => tail = t,
                _ => break,
            }
        }
        if !segments.is_empty() {
            out.push(segments);
        }
    }
    out
}

/// `--flag` names in `text`.
fn flag_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 2..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            || !after.starts_with(|c: char| c.is_ascii_lowercase())
        {
            continue;
        }
        let end =
            after.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')).unwrap_or(after.len());
        out.push(after[..end].trim_end_matches('-').to_string());
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Files that are modules compiled for tests only (`#[cfg(test)] mod
/// name;` in their parent, as this file is): their literals are test
/// inputs, not messages.
fn test_only_modules(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for file in files {
        let source = std::fs::read_to_string(file).unwrap();
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let parent = file.parent().unwrap_or(Path::new(""));
        // `mod.rs`, `lib.rs` and `main.rs` hold their children beside them;
        // `foo.rs` holds them in `foo/`.
        let children = if matches!(stem, "mod" | "lib" | "main") { parent.to_path_buf() } else { parent.join(stem) };
        let mut rest = source.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = rest[at + 12..].trim_start();
            let declared = rest.strip_prefix("mod ").and_then(|r| r.split_once(';')).map(|(name, _)| name.trim());
            if let Some(name) = declared.filter(|n| n.chars().all(|c| c.is_alphanumeric() || c == '_')) {
                out.insert(children.join(format!("{name}.rs")));
                out.insert(children.join(name).join("mod.rs"));
            }
        }
    }
    out
}

/// The source before its inline `#[cfg(test)] mod …` (tests sit at the
/// bottom of each file; what they say is not a message to a user).
fn outside_tests(source: &str) -> &str {
    let mut from = 0;
    while let Some(at) = source[from..].find("#[cfg(test)]") {
        let at = from + at;
        let next = source[at + 12..].trim_start();
        if next.starts_with("mod ") && next.find('{').is_some_and(|b| next.find(';').is_none_or(|s| b < s)) {
            return &source[..at];
        }
        from = at + 12;
    }
    source
}

/// The string literals of Rust source (plain, byte and raw), without
/// comments, char literals and lifetimes; a `\` line continuation is joined.
fn string_literals(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1; // a lifetime
            }
        } else if (c == 'r' || (c == 'b' && at(i + 1) == 'r'))
            && !at(i.wrapping_sub(1)).is_alphanumeric()
            && matches!(at(i + 1 + usize::from(c == 'b')), '"' | '#')
        {
            let mut j = i + 1 + usize::from(c == 'b');
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                i += 1;
                continue;
            }
            let start = j + 1;
            let mut k = start;
            while k < chars.len() && !(chars[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#')) {
                k += 1;
            }
            out.push(chars[start..k.min(chars.len())].iter().collect());
            i = k + 1 + hashes;
        } else if c == '"' {
            let mut text = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    match at(i + 1) {
                        '\n' => {
                            i += 2;
                            while at(i).is_whitespace() {
                                i += 1;
                            }
                            continue;
                        }
                        'n' => text.push('\n'),
                        other => text.push(other),
                    }
                    i += 2;
                } else {
                    text.push(chars[i]);
                    i += 1;
                }
            }
            out.push(text);
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_scanner_should_read_literals_and_names_as_a_reader_would() {
    let source = "// \"--commented\"\nfn f<'a>(c: char) { let q = '\"'; let s = \"raise spec.limits.cpu \\\n    (--guest-cpu)\"; let r = r#\"x \"--raw-flag\" y\"#; }\n#[cfg(test)]\nmod tests { \"--test-only\" }";
    let literals = string_literals(outside_tests(source));
    assert_eq!(literals, vec!["raise spec.limits.cpu (--guest-cpu)".to_string(), "x \"--raw-flag\" y".to_string()]);
    assert_eq!(spec_paths("raise spec.limits.maxOutput, or self.spec.x"), vec![vec!["limits", "maxOutput"]]);
    assert_eq!(flag_names("use --max-guest-cpu=2 (not ---, not a--b)"), vec!["max-guest-cpu"]);
    let schema = reconciler_spec_schema();
    assert!(schema_has(&schema, &["limits".into(), "cpu".into()]));
    assert!(schema_has(&schema, &["grants".into(), "owns".into(), "kind".into()]), "through an array");
    assert!(!schema_has(&schema, &["limits".into(), "nonsense".into()]));
    assert!(cli_flags().contains("max-guest-cpu") && !cli_flags().contains("nonsense"));
}
