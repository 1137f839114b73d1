//! The repository names what it serves by requirement, never by an issue's number. An issue
//! list is not part of the repository, so a reader cannot follow "see issue N"; an R-code is
//! defined in docs/requirements.md. This test fails on any citation of an issue by number
//! (the word "issue" or "issues", any case, then whitespace and a digit, also where a comment
//! wraps between the two) in src/, tests/, scripts/, deploy/, docs/, README.md,
//! CONTRIBUTING.md, BENCHMARKS.md and Cargo.toml, naming each file and line. Needs no
//! cluster.
//!
//! That every R-code cited is defined in docs/requirements.md is checked by tests/docs.rs.
//!
//! The word is put together at run time, so that this file does not cite what it looks for.
#![allow(clippy::unwrap_used, reason = "a failed step must fail the test")]

#[path = "common/files.rs"]
mod files;

use std::path::Path;

use files::{files_under, repo};

/// The folders read, every file under them.
const DIRS: [&str; 5] = ["src", "tests", "scripts", "deploy", "docs"];
/// The files of the repository's root read.
const FILES: [&str; 4] = [
    "README.md",
    "CONTRIBUTING.md",
    "BENCHMARKS.md",
    "Cargo.toml",
];

/// The word looked for, in lower case.
fn word() -> String {
    ["iss", "ue"].concat()
}

#[test]
fn nothing_cites_an_issue_by_number() {
    let mut files = Vec::new();
    for dir in DIRS {
        let cached = |p: &Path| !p.components().any(|c| c.as_os_str() == "__pycache__");
        files.extend(files_under(&repo().join(dir), &cached));
    }
    files.extend(FILES.iter().map(|f| repo().join(f)));
    assert!(files.len() >= 100, "too few files found: {}", files.len());
    let mut problems = Vec::new();
    for file in &files {
        // Files that are not text (none today) cite nothing.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(repo()).unwrap_or(file).display();
        for (line, cited) in citations(&text) {
            problems.push(format!("{shown}:{line}: {cited}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} citations of an issue by number; cite the requirement instead (an R-code of \
         docs/requirements.md, added there when none fits):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The citations in `text`: the line each starts on (from 1) and what it says, up to its
/// number. A citation is the word (or its plural) as a word of its own, in any case, then
/// whitespace and a digit. Where the whitespace holds a line break, what begins a comment or
/// a quote on the next line (`//!`, `///`, `//`, `#`, `*`, `>`, `--`) counts as whitespace,
/// so a citation wrapped in a comment is found too.
fn citations(text: &str) -> Vec<(usize, String)> {
    let lower = text.to_ascii_lowercase();
    let word = word();
    let mut found = Vec::new();
    for (at, _) in lower.match_indices(&word) {
        let before = lower[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // inside another word
        }
        let mut end = at + word.len();
        if lower[end..].starts_with('s') {
            end += 1;
        }
        let Some(digit) = number_after(&lower[end..]) else {
            continue;
        };
        let number_end = end
            + digit
            + lower[end + digit..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(lower.len() - end - digit);
        let line = 1 + text[..at].matches('\n').count();
        let cited = format!("{} {}", &text[at..end], &text[end + digit..number_end]);
        found.push((line, cited));
    }
    found
}

/// Where the digit that follows `rest` after whitespace begins (at least one whitespace
/// character; comment leaders after a line break count as whitespace), if one does.
fn number_after(rest: &str) -> Option<usize> {
    let mut at = 0;
    let mut spaced = false;
    loop {
        let tail = &rest[at..];
        let c = tail.chars().next()?;
        if c.is_ascii_digit() {
            return spaced.then_some(at);
        }
        if c.is_whitespace() {
            at += c.len_utf8();
            spaced = true;
            if c == '\n' {
                let indent = rest[at..].len() - rest[at..].trim_start_matches([' ', '\t']).len();
                at += indent;
                let after = &rest[at..];
                let leader = ["//!", "///", "//", "--", "#", "*", ">"]
                    .iter()
                    .find(|l| after.starts_with(**l));
                at += leader.map_or(0, |l| l.len());
            }
            continue;
        }
        return None;
    }
}

// ---- The check, fed what it must and must not find ----

#[test]
fn citations_are_found_with_their_line_in_any_case_and_wrapped() {
    let w = word();
    let up = w.to_uppercase();
    let text = format!(
        "fn a() {{}}\n// {w} 36 item 5: x\n/// ({w}s 39 and 40)\n{up}\t7\n\
         //! pure (R42, {w}\n//! 36 item 5): which\n# seed of {w}\n#   39 without\n"
    );
    let found = citations(&text);
    assert_eq!(
        found,
        vec![
            (2, format!("{w} 36")),
            (3, format!("{w}s 39")),
            (4, format!("{up} 7")),
            (5, format!("{w} 36")),
            (7, format!("{w} 39")),
        ]
    );
}

#[test]
fn other_uses_of_the_word_are_not_citations() {
    let w = word();
    let text = format!(
        "an {w} of TLS\nas k3s {w} them.\n{w}: foundation\nthe {w}'s target 5\n\
         {w}d 3 times\nt{w} 4\n{w}\nx 4\n{w}5\n"
    );
    assert_eq!(citations(&text), Vec::<(usize, String)>::new());
}

#[test]
fn a_planted_citation_in_a_repository_file_would_be_named() {
    // What the scan of the repository reports for a file, shown on a copy of a real one.
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(citations(&readme).is_empty());
    let planted = format!("{readme}\nSee {} 12 for why.\n", word());
    let lines = planted.matches('\n').count();
    assert_eq!(citations(&planted), vec![(lines, format!("{} 12", word()))]);
}
