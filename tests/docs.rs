//! The README and the guide in `docs/`: every relative link resolves (to a file, and to a heading
//! of it when the link names one), and every flag `--help` lists is documented somewhere in them.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README and every Markdown page under `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text of a page outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// A line with its inline code spans taken out (a link inside backticks is no link).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of the inline links `[text](target)` of a page.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings, with GitHub's `-1`, `-2` for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(&heading.replace('`', ""));
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if !anchor.is_empty() {
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The long flags `drip --help` lists.
fn help_flags() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_drip"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        for word in line.split([' ', ',', '=', '[', '<']) {
            if let Some(name) = word.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !name.is_empty() {
                    flags.insert(format!("--{name}"));
                }
            }
        }
    }
    flags
}

#[test]
fn every_flag_of_help_is_documented() {
    let flags = help_flags();
    assert!(
        flags.contains("--rate") && flags.contains("--overflow"),
        "{flags:?}"
    );
    let all: String = pages()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let missing: Vec<&String> = flags
        .iter()
        .filter(|f| !["--help", "--version"].contains(&f.as_str()))
        .filter(|f| {
            // The flag as a word: `--key` is not documented by `--key-rate`.
            !all.match_indices(f.as_str()).any(|(at, _)| {
                let next = all[at + f.len()..].chars().next();
                !next.is_some_and(|c| c.is_alphanumeric() || c == '-')
            })
        })
        .collect();
    assert!(missing.is_empty(), "flags no page documents: {missing:?}");
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    let text = "# A `b` (c)\n\nsee [x](#a-b-c) and [y](#nope)\n```\n[z](#in-code)\n```\n";
    assert_eq!(links(text), vec!["#a-b-c", "#nope"]);
    let anchors = anchors(text);
    assert!(anchors.contains("a-b-c"));
    assert!(!anchors.contains("nope"));
    assert_eq!(
        slug("One limit shared by many drips (--share)"),
        "one-limit-shared-by-many-drips---share"
    );
}

/// The chat recipes of the cookbook (Anthropic's repeated in docs/jobs.md): for a provider that
/// allows 500 requests, 30,000 input and 10,000 output tokens a minute (Anthropic's), or 500
/// requests and 30,000 tokens together (OpenAI's), each budget's rate a minute plus its burst
/// stays within the provider's minute, as the recipes say, so no minute of theirs sees more.
#[test]
fn the_chat_recipe_keeps_each_budget_within_the_providers_minute() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // RATE/min:BURST after `prefix` on `line`, as the rate plus the burst.
    let minute = |line: &str, prefix: &str| -> Option<u64> {
        let rest = &line[line.find(prefix)? + prefix.len()..];
        let spec = rest.split_whitespace().next()?;
        let (rate, burst) = spec.split_once("/min:")?;
        Some(rate.parse::<u64>().ok()? + burst.parse::<u64>().ok()?)
    };
    for page in ["docs/cookbook.md", "docs/jobs.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("--cost-rate in=") && l.contains("--cost-rate out="))
            .unwrap_or_else(|| panic!("{page}: no chat recipe"));
        let (requests, tokens) = (lines[at - 2], lines[at]);
        for (budget, most) in [
            (minute(requests, "drip -r "), 500),
            (minute(tokens, "--cost-rate in="), 30_000),
            (minute(tokens, "--cost-rate out="), 10_000),
        ] {
            let budget = budget.unwrap_or_else(|| panic!("{page}: {requests} / {tokens}"));
            assert!(
                budget <= most,
                "{page}: {budget} a minute of {most}: {tokens}"
            );
        }
    }
    // OpenAI's, one budget of input and output tokens together: 500
    // requests and 30,000 tokens a minute.
    let text = std::fs::read_to_string(root.join("docs/cookbook.md")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("--cost-rate in+out="))
        .expect("cookbook: no OpenAI chat recipe");
    let (requests, tokens) = (lines[at - 2], lines[at]);
    for (budget, most) in [
        (minute(requests, "drip -r "), 500),
        (minute(tokens, "--cost-rate in+out="), 30_000),
    ] {
        let budget = budget.unwrap_or_else(|| panic!("cookbook: {requests} / {tokens}"));
        assert!(
            budget <= most,
            "cookbook: {budget} a minute of {most}: {tokens}"
        );
    }
}

/// The README's one `apt-get install` line installs every outside tool a test drives
/// (`common::TOOLS`), and nothing else; `.ci/run` looks for each tool and knows its package.
#[test]
fn the_readme_and_ci_install_every_tool_the_tests_drive() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("apt-get install -y "))
        .expect("README.md: no `apt-get install -y` line");
    let listed: BTreeSet<&str> = line.split_whitespace().skip(3).collect();
    let packages: BTreeSet<&str> = crate::common::TOOLS.iter().map(|t| t.package).collect();
    assert_eq!(listed, packages, "README.md: {line}");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let words: BTreeSet<&str> = ci
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .collect();
    for tool in crate::common::TOOLS {
        assert!(
            words.contains(tool.name) && words.contains(tool.package),
            ".ci/run: no {} ({})",
            tool.name,
            tool.package
        );
    }
    assert!(ci.contains("export DRIP_REQUIRE_TOOLS=1"), ".ci/run");
}
