//! docs/benchmarks.md states targets and methods, never a measured figure of its own: the
//! figures are BENCHMARKS.md's (written by scripts/bench), and the page links to them, so the
//! two cannot disagree. The check finds the figures of the page as it once was (its own test).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "common/files.rs"]
mod files;

use files::read;

/// The units after a number that make it a measured quantity (sizes, times, rates, shares),
/// unless it is a target; one space between each.
const UNITS: &str = "B bytes KiB MiB GiB Ki Mi Gi KB MB GB µs ms s min % req/s requests/s";

#[test]
fn the_benchmarks_page_states_no_figure_of_its_own() {
    let figures = measured_figures(&read("docs/benchmarks.md"));
    assert!(
        figures.is_empty(),
        "docs/benchmarks.md states measured figures; they belong in BENCHMARKS.md (its table, \
         or scripts/bench.d/analysis.md), and the page links to the section that has them. \
         Only targets stay, right after ≤, ≥, < or >:\n  {}",
        figures.join("\n  ")
    );
}

/// The measured figures of `text`, each as "line N: figure": every number with a unit after it
/// ([`UNITS`], a space between or none), a decimal point or a thousands separator, unless it is
/// a target: right after `≤` or `≥`, or after `<` or `>` with a space before it (so neither a
/// quote's `>` nor a tag's counts), spaces between. Digits inside a word are not a number.
fn measured_figures(text: &str) -> Vec<String> {
    let mut figures = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let inside_word = i > 0
                && (chars[i - 1].is_alphanumeric() || matches!(chars[i - 1], '_' | '.' | ','));
            if !chars[i].is_ascii_digit() || inside_word {
                i += 1;
                continue;
            }
            let digits = |from: usize| {
                chars[from..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count()
            };
            let mut end = i + digits(i);
            let mut exact = false; // a decimal point or a thousands separator
            loop {
                let next = chars.get(end + 1).is_some_and(char::is_ascii_digit);
                match chars.get(end) {
                    Some('.') if next => end += 1 + digits(end + 1),
                    Some(',') if next && digits(end + 1) == 3 => end += 4,
                    _ => break,
                }
                exact = true;
            }
            let gap = usize::from(chars.get(end) == Some(&' '));
            let unit: String = chars[end + gap..]
                .iter()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '%'))
                .collect();
            let has_unit = UNITS.split(' ').any(|u| u == unit);
            let before = chars[..i].iter().rposition(|c| *c != ' ');
            let target = before.is_some_and(|b| match chars[b] {
                '≤' | '≥' => true,
                '<' | '>' => b > 0 && chars[b - 1] == ' ',
                _ => false,
            });
            if (exact || has_unit) && !target {
                let shown: String = if has_unit {
                    chars[i..end + gap + unit.chars().count()].iter().collect()
                } else {
                    chars[i..end].iter().collect()
                };
                figures.push(format!("line {}: {shown}", n + 1));
            }
            i = end;
        }
    }
    figures
}

#[test]
fn a_measured_figure_on_the_benchmarks_page_is_found() {
    // Lines of the page as it was when it stated figures of its own.
    let old = "| binary, static musl x86_64 / aarch64 / armv7 | 4.49 / 3.76 / 3.62 MiB | ≤ 6 MiB: met |\n\
               | API requests per converged variant | 1.93 | ≤ 1.5: missed |\n\
               | GET: req/s, p99 (HTTP / HTTPS) | 92,984, 0.85 ms / 85,187, 0.93 ms | ≥ 50,000, ≤ 2 ms |\n\
               | steady state: writes, reads, Lease requests per minute | 0, 0, 12 | 0, 0, ≤ 12: met |\n\
               | memory beside Argo Rollouts, 10 to 1000 × 5 | 8 to 9 % | ≤ 10 %: met |\n\
               | real node: a wake, p50 / p95 | 1.85 / 3.08 s | p95 < 30 s: met |\n\
               the static musl x86_64 is 5,851,960 (5.58 MiB), its request 16Mi, ready in 23s\n\
               > 4.49 MiB, <b>6 MiB</b>, −1.9 MiB, about 3% fewer\n";
    let expected = [
        "line 1: 4.49",
        "line 1: 3.76",
        "line 1: 3.62 MiB",
        "line 2: 1.93",
        "line 3: 92,984",
        "line 3: 0.85 ms",
        "line 3: 85,187",
        "line 3: 0.93 ms",
        "line 5: 9 %",
        "line 6: 1.85",
        "line 6: 3.08 s",
        "line 7: 5,851,960",
        "line 7: 5.58 MiB",
        "line 7: 16Mi",
        "line 7: 23s",
        "line 8: 4.49 MiB",
        "line 8: 6 MiB",
        "line 8: 1.9 MiB",
        "line 8: 3%",
    ];
    assert_eq!(measured_figures(old), expected);
    let targets = "| binary | ≤ 6 MiB each | p95 < 30 s | ≥ 85 % and ≤ 118 % of glibc's |\n\
                   (≤ 1.6 per variant) ≤ 24 / ≤ 28 MiB, ≥ 50000 req/s; 1000 × 5 on 2 cores, \
                   50 connections, p99, x86_64, armv7, R11, v1.10.2, `instances: 0`\n";
    assert_eq!(measured_figures(targets), Vec::<String>::new());
}
