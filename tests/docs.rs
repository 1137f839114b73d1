//! The documentation holds together. Needs no cluster. It checks that:
//!
//! - README.md is a front door: at most 150 lines, with `## Quick start` within its first 60
//!   lines and, under it, an `sh` block of exactly two commands, `scripts/demo` and
//!   `scripts/test`;
//! - every relative link (`[x](path)`, `[x](path#anchor)`, `[x](#anchor)`) of README.md,
//!   CONTRIBUTING.md, BENCHMARKS.md, docs/*.md and deploy/**/*.md names a file that exists,
//!   and an anchor into a markdown file names one of its headings (GitHub's slugs);
//! - every requirement code cited in src/, tests/ and scripts/ is defined, once, in
//!   docs/requirements.md;
//! - every block the cluster tests run through `markdown_block` is where they look for it;
//! - docs/benchmarks.md states no measured figure: those are BENCHMARKS.md's, which
//!   `scripts/bench` writes, and the page links to them. On the page, a number with a unit
//!   ([`UNITS`]), a decimal point or a thousands separator stands only as a target, right
//!   after `≤` or `≥`, or `<` or `>` with a space before it (`≤ 6 MiB`, `p95 < 30 s`).
//!   Counts without a unit (`1000 × 5`, `2 cores`) and digits inside a word (`p99`, `x86_64`,
//!   `R11`) may stand.
//!
//! Each check collects what is wrong and fails naming all of it; the tests at the end feed
//! the checks broken input, so that none of them passes by finding nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/files.rs"]
mod files;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use files::{files_under, read, repo};

/// The most lines README.md may have.
const README_MAX_LINES: usize = 150;
/// The line by which README.md's `## Quick start` must have begun.
const QUICK_START_BY_LINE: usize = 60;
/// The commands of the quick start's `sh` block, in order.
const QUICK_START: [&str; 2] = ["scripts/demo", "scripts/test"];

#[test]
fn the_readme_is_short() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail to docs/ or \
         CONTRIBUTING.md and link it"
    );
}

#[test]
fn the_quick_start_comes_first_with_two_commands() {
    let problems = quick_start_problems(&read("README.md"));
    assert!(problems.is_empty(), "README.md: {}", problems.join("; "));
}

#[test]
fn every_relative_link_resolves() {
    let files = markdown_files();
    assert!(files.len() >= 10, "too few markdown files found: {files:?}");
    let (checked, problems) = link_problems(&files);
    assert!(
        checked >= 50,
        "only {checked} relative links found in {files:?}"
    );
    assert!(
        problems.is_empty(),
        "{} broken relative links:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn every_cited_requirement_is_defined() {
    let mut cited = BTreeMap::new();
    for dir in ["src", "tests", "scripts"] {
        for file in files_under(&repo().join(dir), &|_| true) {
            // Binary files (compiled Python) cite nothing.
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            for code in requirement_codes(&text) {
                cited.entry(code).or_insert_with(|| relative(&file));
            }
        }
    }
    assert!(
        cited.len() >= 30,
        "only {} codes cited: {cited:?}",
        cited.len()
    );
    let problems = requirement_problems(&cited, &read("docs/requirements.md"));
    assert!(
        problems.is_empty(),
        "docs/requirements.md:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_blocks_the_tests_run_are_where_they_look() {
    let mut found = 0;
    let mut problems = Vec::new();
    // Not this file, whose own text names the call.
    let this = repo().join(file!());
    let rust = |p: &Path| p.extension() == Some("rs".as_ref()) && p != this;
    for file in files_under(&repo().join("tests"), &rust) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (doc, marker, lang) in markdown_block_calls(&text) {
            found += 1;
            let at = format!(
                "{}: markdown_block({doc:?}, {marker:?}, {lang:?})",
                relative(&file)
            );
            let Ok(page) = std::fs::read_to_string(repo().join(&doc)) else {
                problems.push(format!("{at}: {doc} does not exist"));
                continue;
            };
            match page.split_once(marker.as_str()) {
                None => problems.push(format!("{at}: {doc} has no {marker}")),
                Some((_, after)) if !after.contains(&format!("```{lang}\n")) => {
                    problems.push(format!("{at}: no {lang} block after {marker} in {doc}"));
                }
                Some(_) => {}
            }
        }
    }
    assert!(
        found >= 3,
        "only {found} markdown_block calls found under tests/"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---- The checks ----

/// What is wrong with `readme`'s quick start: where its heading is, and its `sh` block.
fn quick_start_problems(readme: &str) -> Vec<String> {
    let lines: Vec<&str> = readme.lines().collect();
    let Some(heading) = lines.iter().position(|l| l.trim_end() == "## Quick start") else {
        return vec!["no line `## Quick start`".into()];
    };
    let mut problems = Vec::new();
    if heading + 1 > QUICK_START_BY_LINE {
        problems.push(format!(
            "`## Quick start` is on line {}, after line {QUICK_START_BY_LINE}",
            heading + 1
        ));
    }
    let section = lines[heading + 1..]
        .iter()
        .take_while(|l| !l.starts_with("## "));
    let mut block = section.skip_while(|l| l.trim_end() != "```sh");
    if block.next().is_none() {
        problems.push("no ```sh block under `## Quick start`".into());
        return problems;
    }
    let mut commands = Vec::new();
    let mut closed = false;
    for line in block {
        if line.trim_end() == "```" {
            closed = true;
            break;
        }
        let command = line
            .split_once('#')
            .map_or(*line, |(before, _)| before)
            .trim();
        if !command.is_empty() {
            commands.push(command);
        }
    }
    if !closed {
        problems.push("the quick start's sh block does not end".into());
    }
    if commands != QUICK_START {
        problems.push(format!(
            "the quick start's sh block runs {commands:?}, not exactly {QUICK_START:?}"
        ));
    }
    problems
}

/// The markdown files whose links are checked.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let is_md = |p: &Path| p.extension() == Some("md".as_ref());
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "BENCHMARKS.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    files.extend(
        files_under(&root.join("docs"), &is_md)
            .into_iter()
            .filter(|p| p.parent() == Some(&root.join("docs"))),
    );
    files.extend(files_under(&root.join("deploy"), &is_md));
    files
}

/// How many relative links `files` hold, and each one that does not resolve.
fn link_problems(files: &[PathBuf]) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut problems = Vec::new();
    let mut anchors: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for (line, target) in links(&text) {
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            checked += 1;
            let at = format!("{}:{line}: ({target})", relative(file));
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                problems.push(format!("{at}: {} does not exist", resolved.display()));
                continue;
            }
            if anchor.is_empty() || resolved.extension() != Some("md".as_ref()) {
                continue;
            }
            let slugs = anchors
                .entry(resolved.clone())
                .or_insert_with(|| heading_slugs(&std::fs::read_to_string(&resolved).unwrap()));
            if !slugs.contains(anchor) {
                problems.push(format!(
                    "{at}: {} has no heading #{anchor} (it has: {})",
                    relative(&resolved),
                    slugs.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    (checked, problems)
}

/// The link targets of `text` outside code (fenced blocks and code spans), each with its
/// line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = without_code(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    let mut offset = 0;
    while let Some(at) = rest.find("](") {
        let start = at + 2;
        let target: String = rest[start..]
            .chars()
            .take_while(|c| *c != ')' && !c.is_whitespace())
            .collect();
        let line = prose[..offset + at].matches('\n').count() + 1;
        found.push((line, target));
        offset += start;
        rest = &rest[start..];
    }
    found
}

/// `text` with its fenced code blocks and code spans blanked out (newlines kept, so line
/// numbers stay).
fn without_code(text: &str) -> String {
    let mut prose = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    // A code span opens with a run of backticks and closes with a run of the same length.
    let chars: Vec<char> = prose.chars().collect();
    let mut out = String::with_capacity(prose.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        let close = (i + run..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|c| **c == '`').count() == run
                && (j == 0 || chars[j - 1] != '`')
        });
        let end = close.map_or(i + run, |j| j + run);
        for c in &chars[i..end] {
            out.push(if *c == '\n' { '\n' } else { ' ' });
        }
        i = end;
    }
    out
}

/// The anchors GitHub gives the headings of a markdown text.
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut slugs = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let count = seen.entry(base.clone()).or_insert(0);
        slugs.insert(match *count {
            0 => base,
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    slugs
}

/// GitHub's anchor of a heading: its text (a link's text, not its target) in lower case,
/// spaces as `-`, every other character but letters, digits, `-` and `_` left out.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The requirement codes (`R` and digits, a word of its own) in `text`.
fn requirement_codes(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| is_code(w))
        .map(str::to_string)
        .collect()
}

/// Whether `word` is a requirement code: `R` and digits.
fn is_code(word: &str) -> bool {
    word.len() > 1 && word.starts_with('R') && word[1..].chars().all(|c| c.is_ascii_digit())
}

/// What is wrong with `requirements` (docs/requirements.md) for the codes `cited` (code →
/// where first cited): a cited code without an entry (`**R1**`), an entry given twice.
fn requirement_problems(cited: &BTreeMap<String, String>, requirements: &str) -> Vec<String> {
    let mut defined: BTreeMap<String, usize> = BTreeMap::new();
    for part in requirements.split("**").skip(1).step_by(2) {
        if is_code(part) {
            *defined.entry(part.to_string()).or_insert(0) += 1;
        }
    }
    let mut problems: Vec<String> = cited
        .iter()
        .filter(|(code, _)| !defined.contains_key(*code))
        .map(|(code, at)| format!("{code} (cited in {at}) has no entry **{code}**"))
        .collect();
    problems.extend(
        defined
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(code, n)| format!("{code} has {n} entries")),
    );
    problems
}

/// The (file, marker, language) of each call of `markdown_block` with three string literals
/// in `text`.
fn markdown_block_calls(text: &str) -> Vec<(String, String, String)> {
    let mut calls = Vec::new();
    for (at, call) in text.match_indices("markdown_block(") {
        let mut rest = &text[at + call.len()..];
        let mut strings = Vec::new();
        while strings.len() < 3 {
            let Some(open) = rest.trim_start().strip_prefix('"') else {
                break; // not a literal: the function's own definition, or a variable
            };
            let Some((literal, after)) = open.split_once('"') else {
                break;
            };
            strings.push(literal.to_string());
            let after = after.trim_start();
            rest = after.strip_prefix(',').unwrap_or(after);
        }
        if let [file, marker, lang] = strings.as_slice() {
            calls.push((file.clone(), marker.clone(), lang.clone()));
        }
    }
    calls
}

// ---- Helpers ----

/// `path` relative to the repository's root, for messages.
fn relative(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

// ---- The checks fail on broken input ----

#[test]
fn a_quick_start_that_is_late_or_runs_other_commands_fails() {
    let good =
        "# x\n\n## Quick start\n\n```sh\nscripts/demo   # runs\n# a comment\nscripts/test\n```\n";
    assert_eq!(quick_start_problems(good), Vec::<String>::new());
    let late = format!("{}{good}", "line\n".repeat(60));
    assert!(quick_start_problems(&late)[0].contains("after line 60"));
    let three = good.replace("scripts/test\n", "scripts/test\ncargo test\n");
    assert!(quick_start_problems(&three)[0].contains("cargo test"));
    let none = "## Quick start\n\nscripts/demo\n\n## Next\n\n```sh\nscripts/demo\n```\n";
    assert!(quick_start_problems(none)[0].contains("no ```sh block"));
    assert_eq!(quick_start_problems("# x\n").len(), 1);
}

#[test]
fn a_missing_file_or_heading_is_a_broken_link() {
    let dir = std::env::temp_dir().join(format!("mutantops-docs-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let page = dir.join("sub/page.md");
    std::fs::write(
        dir.join("other.md"),
        "# Other\n\n## The operator's `ServiceAccount`\n",
    )
    .unwrap();
    std::fs::write(
        &page,
        "# Page\n\n[a](../other.md) [b](../other.md#the-operators-serviceaccount) \
         [c](#page)\n[d](../missing.md) [e](../other.md#nope) [f](#nowhere)\n\
         `[g](not-a-link.md)` [h](https://example.org/x)\n```\n[i](in-a-block.md)\n```\n",
    )
    .unwrap();
    let (checked, problems) = link_problems(std::slice::from_ref(&page));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(checked, 6, "{problems:?}");
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains(":4: (../missing.md)"), "{problems:?}");
    assert!(problems[1].contains("no heading #nope"), "{problems:?}");
    assert!(problems[2].contains("no heading #nowhere"), "{problems:?}");
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Metrics, probes and logs"), "metrics-probes-and-logs");
    assert_eq!(slug("Without `spec.devices`"), "without-specdevices");
    assert_eq!(
        slug("The operator's ServiceAccount"),
        "the-operators-serviceaccount"
    );
    assert_eq!(slug("[Install](x.md) on k3s"), "install-on-k3s");
    let repeated = heading_slugs("# A\n## A\n```\n# B\n```\n#C\n### A b_c\n");
    let expected = ["a", "a-1", "a-b_c"].map(String::from);
    assert_eq!(repeated, BTreeSet::from(expected));
}

#[test]
fn an_undefined_or_doubly_defined_requirement_fails() {
    let unknown = ["R", "999"].concat();
    let cited = BTreeMap::from([
        ("R1".to_string(), "src/a.rs".to_string()),
        (unknown.clone(), "tests/b.rs".to_string()),
    ]);
    let text = "- **R1**: one\n- **R2**: two, not R1\n- **R2**: again\n";
    let problems = requirement_problems(&cited, text);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with(&format!("{unknown} (cited in tests/b.rs)")));
    assert_eq!(problems[1], "R2 has 2 entries");
    let words = requirement_codes("R1, R22: not R, Rx, R3a, xR4 or R5_; (R6)");
    assert_eq!(words, BTreeSet::from(["R1", "R22", "R6"].map(String::from)));
}
