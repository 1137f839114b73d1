//! The modules of `src/` form layers, and every import points down: a module uses only
//! modules of a lower layer (the README's "Layout" lists them, lowest first). This test reads
//! every source file and fails on an import that points up or sideways, so a cycle cannot
//! come back unnoticed.

use std::{collections::BTreeMap, fs, path::Path};

/// Lowest first. Modules on one line are one layer: they may not import each other.
const LAYERS: &[&[&str]] = &[
    &["lib"],
    &["crd"],
    &["variant"],
    &["config"],
    &["shutdown", "logging"],
    &["connect"],
    &["cache"],
    &["http"],
    &["metrics"],
    &["lease"],
    &["submit"],
    &["controller"],
    &["admin", "api"],
    &["operator"],
    &["cli"],
    &["main"],
];

/// What lib.rs defines itself (the error layer): `crate::Error`, `crate::Result`, ...
const LIB_ITEMS: &[&str] = &[
    "Error",
    "Result",
    "error_chain",
    "expected_api_error",
    "api_status_is",
    "status_is",
    "already_exists",
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file of `src/` belongs to: `src/api/auth.rs` is `api`.
fn module_of(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The text with `//` comments removed (doc comments name modules freely).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // not inside a string such as "http://..."
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level names a file reaches through `crate::` (or `mutantops::` in main.rs),
/// including every name of a `use crate::{a::.., b, ..}` group.
fn used_names(text: &str, root: &str) -> Vec<String> {
    let mut names = Vec::new();
    let prefix = format!("{root}::");
    let mut rest = text;
    while let Some(at) = rest.find(&prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // the names at depth 0 of the group
            let mut depth = 0;
            let mut current = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        at_start = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && at_start {
                    if c.is_alphanumeric() || c == '_' {
                        current.push(c);
                    } else if !current.is_empty() {
                        names.push(std::mem::take(&mut current));
                        at_start = false;
                    }
                }
            }
            if !current.is_empty() {
                names.push(current);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import between modules of `src/`, as (file, importer, imported).
fn imports() -> Vec<(String, String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 20, "src/ has only {} files", files.len());
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file).to_path_buf();
        let module = module_of(&relative);
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let text = without_comments(&text);
        let root = if module == "main" {
            "mutantops"
        } else {
            "crate"
        };
        for name in used_names(&text, root) {
            let imported = if LIB_ITEMS.contains(&name.as_str()) {
                "lib".to_string()
            } else {
                name
            };
            if imported != module {
                found.push((relative.display().to_string(), module.clone(), imported));
            }
        }
    }
    found
}

#[test]
fn every_module_of_src_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&src).unwrap_or(f)))
        .filter(|m| layer_of(m).is_none())
        .collect();
    missing.dedup();
    assert!(missing.is_empty(), "modules without a layer: {missing:?}");
}

#[test]
fn every_import_points_down() {
    let imports = imports();
    let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, importer, imported) in &imports {
        let (Some(from), Some(to)) = (layer_of(importer), layer_of(imported)) else {
            wrong
                .entry(file.clone())
                .or_default()
                .push(format!("{imported} (not a module of any layer)"));
            continue;
        };
        if to >= from {
            wrong
                .entry(file.clone())
                .or_default()
                .push(format!("{importer} -> {imported}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that do not point down: {wrong:#?}"
    );
    // the scan sees imports at all: operator reaches most of the crate
    let from_operator = imports.iter().filter(|(_, m, _)| m == "operator").count();
    assert!(from_operator >= 8, "{imports:?}");
}

#[test]
fn the_scanner_reads_grouped_and_plain_paths() {
    let text = "use crate::{\n    cache::{Cache, Caches},\n    crd::Mutation,\n    Error,\n};\nlet x = crate::error_chain(&e);\nlet y = other_crate::api::f();";
    assert_eq!(
        used_names(text, "crate"),
        ["cache", "crd", "Error", "error_chain"]
    );
    assert_eq!(
        without_comments("let a = 1; // crate::api\nlet s = \"http://x\";"),
        "let a = 1; \nlet s = \"http://x\";"
    );
}

/// The files of each folder that forms rooms of its own, lowest first: a file may use (through
/// `super::`) only files before it; `mod.rs` routes and may use them all. Tests inside a file
/// (`use super::*`) reach their own file only.
const ROOMS: &[(&str, &[&str])] = &[
    ("cache", &["state", "index", "reflect", "generated"]),
    (
        "api",
        &[
            "routes",
            "placement",
            "json",
            "auth",
            "budget",
            "error",
            "state",
            "body",
            "check",
            "fresh",
            "mutations",
            "variants",
        ],
    ),
    (
        "controller",
        &[
            "events",
            "announce",
            "context",
            "secret",
            "write",
            "tell",
            "services",
            "reconcile",
        ],
    ),
];

#[test]
fn the_files_of_a_folder_import_only_files_before_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (folder, order) in ROOMS {
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        for file in files {
            let name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // mod.rs routes; a file's own tests (`x/tests.rs`) belong to that file.
            if name == "mod" || name == "tests" {
                continue;
            }
            let Some(at) = order.iter().position(|o| *o == name) else {
                wrong.push(format!("{folder}/{name}.rs is not in ROOMS"));
                continue;
            };
            let text = without_comments(&fs::read_to_string(&file).unwrap());
            for used in used_names(&text, "super") {
                seen += 1;
                match order.iter().position(|o| *o == used) {
                    Some(to) if to < at => {}
                    Some(_) => wrong.push(format!("{folder}/{name}.rs -> {used}")),
                    // `use super::*` in a file's tests, or an item of mod.rs
                    None if used.is_empty() => {}
                    None => wrong.push(format!("{folder}/{name}.rs -> {used} (of mod.rs)")),
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports inside a folder that do not point down: {wrong:#?}"
    );
    assert!(
        seen > 10,
        "the scan sees the imports between files ({seen})"
    );
}
