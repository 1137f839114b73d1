//! The modules of `src/` form layers, and every import points down (CONTRIBUTING.md's
//! "Layout" lists them, lowest first). This test reads every source file, without a build,
//! and checks:
//!
//! - every top-level module of `src/` has a layer ([`LAYERS`]);
//! - every import between them points to a lower layer, however it is written: `crate::x`,
//!   or `super::x` from a top-level file and `super::super::x` from a file one folder deep,
//!   which reach the crate root just as well (`mutantops::x` in main.rs);
//! - inside a folder, a file imports only the files listed before it in [`ROOMS`], never its
//!   folder's root file;
//! - the scanners find what they look for (their own tests).
//!
//! The layers and rooms are in `tests/layers/tables.rs`; `tests/layout.rs` holds
//! CONTRIBUTING.md's "Layout" table to them.
//!
//! So a cycle, or an import that points up or sideways, cannot come back unnoticed.

use std::{collections::BTreeMap, fs, path::Path};

#[path = "layers/tables.rs"]
mod tables;

use tables::{LAYERS, ROOMS};

/// What lib.rs defines itself (the error layer): `crate::Error`, `crate::Result`, ...
const LIB_ITEMS: &[&str] = &[
    "Error",
    "Result",
    "HashMap",
    "error_chain",
    "expected_api_error",
    "api_status_is",
    "status_is",
    "already_exists",
    "not_found",
    "conflict",
    "forbidden",
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
    let mut from = 0;
    while let Some(found) = text[from..].find(&prefix) {
        let at = from + found;
        let before = text[..at].chars().next_back();
        from = at + prefix.len();
        let rest = &text[from..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // e.g. `my_crate::`, or `super::super::` inside a longer chain
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
                        if !current.is_empty() {
                            names.push(std::mem::take(&mut current));
                        }
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

/// How many `super`s lead from `relative` (a file of `src/`) to the crate root: 1 from
/// `api.rs` and `controller/mod.rs`, 2 from `controller/write.rs`; 0 from lib.rs and main.rs.
fn depth_of(relative: &Path) -> usize {
    let parts: Vec<_> = relative.components().collect();
    match parts.last().map(|c| c.as_os_str().to_string_lossy()) {
        Some(last) if last == "mod.rs" => parts.len() - 1,
        Some(last) if parts.len() == 1 && (last == "lib.rs" || last == "main.rs") => 0,
        _ => parts.len(),
    }
}

/// The modules of the crate root that `text` names through `depth` `super`s.
fn through_supers(text: &str, depth: usize) -> Vec<String> {
    if depth == 0 {
        return Vec::new();
    }
    let root = vec!["super"; depth].join("::");
    used_names(text, &root)
        .into_iter()
        .filter(|n| !n.is_empty() && n != "super" && n != "self")
        .collect()
}

/// Every import between modules of `src/`, as (file, importer, imported): through `crate::`
/// and through `super`s that reach the crate root (the tests inside a file are one further).
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
        let code = without_inline_tests(&text);
        let depth = depth_of(&relative);
        let mut names = used_names(&text, root);
        names.extend(through_supers(code, depth));
        names.extend(through_supers(&text[code.len()..], depth + 1));
        for name in names {
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
    let text = "use crate::{\n    cache::{Cache, Caches},\n    crd::Mutation,\n    Error,\n    Result};\nlet x = crate::error_chain(&e);\nlet y = other_crate::api::f();";
    assert_eq!(
        used_names(text, "crate"),
        ["cache", "crd", "Error", "Result", "error_chain"]
    );
    let supers =
        "use super::cache::C;\nuse super::super::super::x::Y;\nlet z = super::super::lease::f();";
    assert_eq!(through_supers(supers, 1), ["cache"]);
    assert_eq!(through_supers(supers, 2), ["lease"]);
    assert!(through_supers(supers, 0).is_empty());
    assert_eq!(depth_of(Path::new("controller/write.rs")), 2);
    assert_eq!(depth_of(Path::new("controller/mod.rs")), 1);
    assert_eq!(depth_of(Path::new("api.rs")), 1);
    assert_eq!(depth_of(Path::new("lib.rs")), 0);
    assert_eq!(
        without_comments("let a = 1; // crate::api\nlet s = \"http://x\";"),
        "let a = 1; \nlet s = \"http://x\";"
    );
}

/// The text of a file without the tests inside it (a `mod tests {` block to the end of the
/// file, as every file of `src/` places it).
fn without_inline_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::{d, e}}` is `a::b`, `a::c::d` and
/// `a::c::e` (an alias `as x` dropped).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let Some(open) = tree.find('{') else {
        let path = tree.split('@').next().unwrap_or_default();
        return vec![path.to_string()];
    };
    let (prefix, group) = (&tree[..open], &tree[open + 1..tree.len() - 1]);
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&group[from..at]);
                from = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[from..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use(p)
                .into_iter()
                .map(move |e| format!("{prefix}{e}"))
        })
        .collect()
}

/// The rooms of its folder a file uses: `super::x` from a file of the folder, `super::super::x`
/// from a file in a room's own folder, `crate::<folder>::x` from either, in `use` trees and in
/// paths written out; an item of the root file (not a room) is named as it is, `*` as "".
fn rooms_used(text: &str, folder: &str, depth: usize) -> Vec<String> {
    let up = format!("{}::", vec!["super"; depth].join("::"));
    let full = format!("crate::{folder}::");
    let mut used = Vec::new();
    let mut rest = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let code = line.trim_start();
        let tree = code
            .strip_prefix("use ")
            .or_else(|| code.strip_prefix("pub use "))
            .or_else(|| {
                code.strip_prefix("pub(")
                    .and_then(|c| c.split_once(") use "))
                    .map(|(_, t)| t)
            });
        let Some(tree) = tree else {
            rest.push_str(line);
            rest.push('\n');
            continue;
        };
        let mut tree = tree.to_string();
        while !tree.contains(';') {
            let Some(next) = lines.next() else { break };
            tree.push_str(next);
        }
        for path in expand_use(tree.trim_end().trim_end_matches(';')) {
            let tail = path.strip_prefix(&up).or_else(|| path.strip_prefix(&full));
            if let Some(tail) = tail.filter(|t| !t.starts_with("super")) {
                used.push(tail.split("::").next().unwrap_or_default().replace('*', ""));
            }
        }
    }
    let mut inline = used_names(&rest, up.trim_end_matches(':'));
    if depth > 1 {
        inline.retain(|u| u != "super");
    }
    used.extend(inline);
    used.extend(used_names(&rest, full.trim_end_matches(':')));
    used
}

#[test]
fn the_files_of_a_folder_import_only_files_before_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut seen = 0;
    let mut folders: Vec<String> = fs::read_dir(&src)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    folders.sort();
    assert!(folders.len() >= 10, "folders of src/: {folders:?}");
    for folder in &folders {
        let Some((_, order)) = ROOMS.iter().find(|(f, _)| f == folder) else {
            wrong.push(format!("src/{folder}/ is not in ROOMS"));
            continue;
        };
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        for file in files {
            let inside = file.strip_prefix(src.join(folder)).unwrap_or(&file);
            let parts: Vec<String> = inside
                .components()
                .map(|c| {
                    c.as_os_str()
                        .to_string_lossy()
                        .trim_end_matches(".rs")
                        .to_string()
                })
                .collect();
            // mod.rs routes; `tests` files and folders hold tests.
            if parts.iter().any(|p| p == "tests") || parts == ["mod"] {
                continue;
            }
            let room = &parts[0];
            let Some(at) = order.iter().position(|o| o == room) else {
                wrong.push(format!("{folder}/{} is not in ROOMS", inside.display()));
                continue;
            };
            let text = fs::read_to_string(&file).unwrap();
            let text = without_comments(without_inline_tests(&text));
            for used in rooms_used(&text, folder, parts.len()) {
                seen += 1;
                match order.iter().position(|o| *o == used) {
                    Some(to) if to < at => {}
                    Some(_) => wrong.push(format!("{folder}/{} -> {used}", inside.display())),
                    None if used.is_empty() => wrong.push(format!(
                        "{folder}/{} -> * (a glob of the root file)",
                        inside.display()
                    )),
                    None => wrong.push(format!(
                        "{folder}/{} -> {used} (of the root file)",
                        inside.display()
                    )),
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports inside a folder that do not point down: {wrong:#?}"
    );
    assert!(
        seen > 40,
        "the scan sees the imports between files ({seen})"
    );
}

#[test]
fn the_room_scanner_reads_nested_and_full_paths() {
    let text = "use super::super::validate::x;\nuse super::check;\nuse crate::variant::{owner::Owner, Base};\nuse crate::{crd::X, variant::names::y};\n#[cfg(test)]\nmod tests {\n    use super::super::build;\n}";
    assert_eq!(
        rooms_used(without_inline_tests(text), "variant", 2),
        ["validate", "owner", "Base", "names"]
    );
    assert_eq!(rooms_used("use super::{a, b::c};", "x", 1), ["a", "b"]);
    let group = "use kube::{\n    api::{Api, Patch},\n    Client,\n};\nuse crate::{api::{x::Y, z}, cache::C};";
    assert_eq!(rooms_used(group, "api", 1), ["x", "z"]);
}
