//! The bash scripts of `scripts/` share their helpers (`step`, `log`, `die`, `fail`,
//! `wait_until`, `kc`, `pick_port`, `apt_install`) through one sourced file, `scripts/lib.sh`,
//! instead of each keeping a copy that drifts from the others. This test reads every script
//! (`scripts/*` and `scripts/*.d/*.sh`) and fails on a function defined twice, naming it and
//! where each definition is; a script's own function takes a name no other script uses. It
//! also has bash parse each of them (`bash -n`), and checks that the main step of
//! `scripts/test` leaves the chaos suite to its own step.
#![allow(clippy::unwrap_used, reason = "a failed step must fail the test")]

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// Entries of `scripts/` not checked: none since the image is built by buildah.
const LEFT_OUT: &[&str] = &[];

/// What `scripts/lib.sh` holds: the helpers no script may define again.
const LIBRARY: &[&str] = &[
    "step",
    "log",
    "die",
    "fail",
    "wait_until",
    "kc",
    "pick_port",
    "apt_install",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    paths
}

/// A bash script: a `#!` line that names bash, or a sourced part (`.sh`).
fn is_bash(path: &Path) -> bool {
    if path.extension().is_some_and(|ext| ext == "sh") {
        return true;
    }
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .next()
        .is_some_and(|first| first.starts_with("#!") && first.contains("bash"))
}

/// `scripts/*` and `scripts/*.d/*.sh`, bash only, without [`LEFT_OUT`]; as paths relative to
/// the repository.
fn scripts() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for path in sorted_entries(&repo().join("scripts")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if LEFT_OUT.contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() && name.ends_with(".d") {
            found.extend(
                sorted_entries(&path)
                    .into_iter()
                    .filter(|p| p.is_file() && p.extension().is_some_and(|ext| ext == "sh")),
            );
        } else if path.is_file() && is_bash(&path) {
            found.push(path);
        }
    }
    found
        .into_iter()
        .map(|p| p.strip_prefix(repo()).unwrap().to_path_buf())
        .collect()
}

/// The name a line defines as a function (`name() {`, `name() (`, `function name {`), if any.
fn definition(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let (rest, keyword) = match line.strip_prefix("function ") {
        Some(rest) => (rest.trim_start(), true),
        None => (line, false),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.')))
        .unwrap_or(rest.len());
    let (name, after) = rest.split_at(end);
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        return None;
    }
    let after = after.trim_start();
    let body = match after.strip_prefix("()") {
        Some(body) => body.trim_start(),
        None if keyword => after,
        None => return None,
    };
    (body.starts_with('{') || body.starts_with('(')).then_some(name)
}

/// The delimiters of the here-documents a line opens (`<<WORD`, `<<-'WORD'`, `<< "WORD"`),
/// in order; here-strings (`<<<`) and shifts (`1 << 2`) open none.
fn heredocs(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while let Some(at) = line[i..].find("<<").map(|at| at + i) {
        i = at + 2;
        if bytes.get(i) == Some(&b'<') {
            // a here-string: skip all of `<<<`
            i += 1;
            continue;
        }
        let mut j = i;
        if bytes.get(j) == Some(&b'-') {
            j += 1;
        }
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        if matches!(bytes.get(j), Some(b'\'' | b'"')) {
            j += 1;
        }
        let word: String = line[j..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            words.push(word);
        }
    }
    words
}

/// The functions a script defines, with their line numbers (from 1). Comments and the bodies
/// of here-documents (Python, YAML, generated files) define nothing.
fn definitions(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if let Some(word) = pending.first() {
            if line.trim_start_matches('\t').trim_end() == word {
                pending.remove(0);
            }
            continue;
        }
        if line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(name) = definition(line) {
            found.push((name.to_string(), number + 1));
        }
        pending.extend(heredocs(line));
    }
    found
}

#[test]
fn no_function_is_defined_twice() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let scripts = scripts();
    for script in &scripts {
        let text = fs::read_to_string(repo().join(script)).unwrap();
        for (name, line) in definitions(&text) {
            defined
                .entry(name)
                .or_default()
                .push(format!("{}:{line}", script.display()));
        }
    }
    let twice: Vec<String> = defined
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("  {name}: {}", places.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "functions defined more than once across scripts/ ({} scripts read): a helper \
         belongs in scripts/lib.sh, which the scripts source; a script's own function takes \
         a name no other script uses:\n{}",
        scripts.len(),
        twice.join("\n")
    );
}

#[test]
fn the_library_holds_the_helpers() {
    let path = Path::new("scripts/lib.sh");
    assert!(
        scripts().iter().any(|p| p == path),
        "scripts/lib.sh is not among the scripts read"
    );
    let text = fs::read_to_string(repo().join(path)).unwrap();
    let names: Vec<String> = definitions(&text).into_iter().map(|(n, _)| n).collect();
    for helper in LIBRARY {
        assert!(
            names.iter().any(|n| n == helper),
            "scripts/lib.sh does not define {helper} (it defines {names:?})"
        );
        // its header says what each one does
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("#   {helper} ")) || l == format!("#   {helper}")),
            "the header of scripts/lib.sh does not describe {helper}"
        );
    }
}

#[test]
fn definitions_are_found_as_bash_reads_them() {
    let text = "\
#!/usr/bin/env bash
step() { printf '%s\\n' \"$*\"; }
  nested_one() {
function with_keyword {
function both() (
# commented() {
echo 'not() {'
x=$((1 << 2))
cat <<<\"here() {\"
python3 - <<'PY'
def python():
inside() {
PY
cat <<-EOF >file
\tgenerated() {
\tEOF
after() {
";
    let names: Vec<(String, usize)> = definitions(text);
    let want = [
        ("step", 2),
        ("nested_one", 3),
        ("with_keyword", 4),
        ("both", 5),
        ("after", 17),
    ];
    assert_eq!(
        names,
        want.map(|(n, l)| (n.to_string(), l)).to_vec(),
        "the definitions found in the sample"
    );
}

#[test]
fn every_script_parses() {
    let mut broken = Vec::new();
    for script in scripts() {
        let output = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .current_dir(repo())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
        if !output.status.success() {
            broken.push(format!(
                "{}: {}",
                script.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    assert!(broken.is_empty(), "bash -n fails:\n{}", broken.join("\n"));
}

/// scripts/test's main step runs every test but those named `chaos_` (`--skip chaos_`): the
/// chaos suite restarts the API server, so it runs alone at the end. A test of `tests/chaos`
/// named otherwise would stop the API server under the other suites (a 30 s outage once left
/// the chart's Deployment without pods for 90 s).
#[test]
fn every_chaos_test_is_skipped_by_the_main_step() {
    let test = fs::read_to_string(repo().join("scripts/test")).unwrap();
    assert!(
        test.contains("--skip chaos_"),
        "scripts/test no longer skips chaos_"
    );
    let mut misnamed = Vec::new();
    let mut found = 0;
    for path in sorted_entries(&repo().join("tests/chaos")) {
        let text = fs::read_to_string(&path).unwrap();
        let mut attribute = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                attribute = true;
            } else if attribute && line.contains("fn ") {
                attribute = false;
                found += 1;
                let name = line.split("fn ").nth(1).unwrap_or_default();
                if !name.starts_with("chaos_") {
                    misnamed.push(format!("{}:{}: {line}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(found >= 3, "tests found in tests/chaos: {found}");
    assert!(
        misnamed.is_empty(),
        "tests of tests/chaos not named chaos_ (scripts/test would run them with the others):\n{}",
        misnamed.join("\n")
    );
}
