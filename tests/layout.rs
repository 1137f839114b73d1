//! CONTRIBUTING.md's "Layout" table has one row per layer of `tests/layers/tables.rs`, in
//! order, naming the layer's modules, and names every room of a folder in its module's row, in
//! order ([`layout_problems`] says how); the check finds what a table leaves out (its own
//! test). Reads files only, without a build.

use std::{fs, path::Path};

#[path = "layers/tables.rs"]
mod tables;

use tables::{LAYERS, ROOMS};

/// The text between backquotes in `text`: `a` and `b/c.rs` in "`a` and `b/c.rs`".
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The rows of CONTRIBUTING.md's "Layout" table, in order: the layer's number, the modules its
/// module column names (`x.rs` and `x/` both name `x`), and the whole row.
fn layout_rows(contributing: &str) -> Vec<(String, Vec<String>, String)> {
    let section = contributing
        .lines()
        .skip_while(|line| line.trim_end() != "## Layout")
        .skip(1)
        .take_while(|line| !line.starts_with("## "));
    let mut rows = Vec::new();
    for line in section.filter(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        let [number, modules, ..] = cells.as_slice() else {
            continue;
        };
        let number = number.trim();
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            continue; // the header and its rule
        }
        let modules = code_spans(modules)
            .into_iter()
            .map(|m| m.trim_end_matches('/').trim_end_matches(".rs").to_string())
            .collect();
        rows.push((number.to_string(), modules, line.to_string()));
    }
    rows
}

/// What CONTRIBUTING.md's "Layout" table leaves out of `layers` and `rooms`: it has a row per
/// layer, numbered from 1, lowest first, whose module column names the modules of that layer
/// and no other (`crd.rs`, `crd/`); and the row of a folder's module names each of its rooms
/// in backquotes, as `x` or `x.rs`, in the order of `rooms` (a room's first such name counts;
/// a room's own folder may be named besides: `x/y.rs`).
fn layout_problems(
    contributing: &str,
    layers: &[&[&str]],
    rooms: &[(&str, &[&str])],
) -> Vec<String> {
    let rows = layout_rows(contributing);
    let mut problems = Vec::new();
    if rows.len() != layers.len() {
        problems.push(format!(
            "the table has {} rows, LAYERS {} layers",
            rows.len(),
            layers.len()
        ));
    }
    for (at, (layer, (number, modules, _))) in layers.iter().zip(&rows).enumerate() {
        let mut want: Vec<&str> = layer.to_vec();
        let mut have: Vec<&str> = modules.iter().map(String::as_str).collect();
        want.sort_unstable();
        have.sort_unstable();
        have.dedup();
        if number != &(at + 1).to_string() || want != have {
            problems.push(format!(
                "row {}: layer {number} names {have:?}, LAYERS has {want:?} as layer {}",
                at + 1,
                at + 1
            ));
        }
    }
    for (folder, names) in rooms {
        let layer = layers.iter().position(|l| l.contains(folder));
        let Some(row) = layer.and_then(|at| rows.get(at)) else {
            problems.push(format!("{folder}: no row of its layer"));
            continue;
        };
        let spans = code_spans(&row.2);
        let mut last: Option<(usize, &str)> = None;
        for room in *names {
            let file = format!("{room}.rs");
            let Some(at) = spans.iter().position(|s| s == room || *s == file) else {
                problems.push(format!(
                    "{folder}/{room}: not named (`{room}` or `{room}.rs`) in the row of {folder}"
                ));
                continue;
            };
            match last {
                Some((before, previous)) if at < before => problems.push(format!(
                    "{folder}/{room}: named before {previous}, which ROOMS has before it"
                )),
                _ => last = Some((at, room)),
            }
        }
    }
    problems
}

#[test]
fn contributing_names_every_layer_and_room() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("CONTRIBUTING.md");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let problems = layout_problems(&text, LAYERS, ROOMS);
    assert!(
        problems.is_empty(),
        "CONTRIBUTING.md's \"Layout\" table and LAYERS/ROOMS of tests/layers/tables.rs differ:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_layout_check_finds_what_the_table_leaves_out() {
    let layers: &[&[&str]] = &[&["lib"], &["crd"], &["api", "admin"], &["cli"], &["main"]];
    let rooms: &[(&str, &[&str])] = &[("crd", &["limits", "spec"]), ("api", &["routes", "batch"])];
    let table = "# Contributing\n\n## Layout\n\n| layer | module | what |\n|---|---|---|\n\
                 | 1 | `lib.rs` | errors |\n\
                 | 2 | `crd.rs`, `crd/` | `spec` (the kinds), `limits` |\n\
                 | 3 | `admin.rs`, `api/` | `routes`; `batch/targets.rs` |\n\
                 | 4 | `cli.rs`, `main.rs` | subcommands; the binary |\n\n\
                 ## Next\n\n| 5 | `main.rs` | outside the section |\n";
    assert_eq!(
        layout_problems(table, layers, rooms),
        [
            "the table has 4 rows, LAYERS 5 layers",
            "row 4: layer 4 names [\"cli\", \"main\"], LAYERS has [\"cli\"] as layer 4",
            "crd/spec: named before limits, which ROOMS has before it",
            "api/batch: not named (`batch` or `batch.rs`) in the row of api",
        ]
    );
    let fixed = table
        .replace(
            "`spec` (the kinds), `limits`",
            "`limits`, `spec` (the kinds)",
        )
        .replace("`batch/targets.rs`", "`batch` (`batch/targets.rs`)")
        .replace(
            "`cli.rs`, `main.rs` | subcommands; the binary |",
            "`cli.rs` | subcommands |\n| 5 | `main.rs` | the binary |",
        );
    assert_eq!(layout_problems(&fixed, layers, rooms), Vec::<String>::new());
    let renumbered = fixed.replace("| 2 | `crd.rs`", "| 7 | `crd.rs`");
    assert_eq!(layout_problems(&renumbered, layers, rooms).len(), 1);
}
