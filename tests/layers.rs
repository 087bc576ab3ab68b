//! docs/architecture.md: "there are no import cycles between the parts".
//! A part is a top-level module of `src/` (a file, or a folder with its
//! `mod.rs`); it uses another when its code (not its comments, not its
//! unit tests) names `crate::OTHER`, in a `use` or by path. The parts and
//! their uses must form no circle, so each lies below the parts it serves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common;

/// The part a file of `src/` belongs to: its top-level module.
fn part_of(src: &Path, file: &Path) -> String {
    let first = file.strip_prefix(src).unwrap().components().next().unwrap();
    let name = first.as_os_str().to_string_lossy();
    name.strip_suffix(".rs").unwrap_or(&name).to_string()
}

/// The code of a file without its comments (a `//` outside a string
/// literal ends the line's code) and its unit tests (from the first
/// `#[cfg(test)]` at the start of a line on).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let mut in_string = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for i in 0..bytes.len() {
            match bytes[i] {
                b'"' if i == 0 || bytes[i - 1] != b'\\' => in_string = !in_string,
                b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => {
                    cut = i;
                    break;
                }
                _ => {}
            }
        }
        code.push_str(&line[..cut]);
        code.push('\n');
    }
    code
}

/// The names at the top level of a `use` group's text (after its `{`):
/// `a::b, c::{d, e}, f}` gives `a`, `c`, `f`.
fn group_heads(group: &str) -> Vec<&str> {
    let (mut heads, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    heads
}

/// The parts `code` uses: each name after `crate::`, and each first name
/// of a `crate::{a, b::{c, d}, e}` group (its groups nested as deep as
/// they go).
fn uses_of(code: &str, parts: &BTreeSet<String>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => group_heads(group),
            None => vec![rest],
        };
        for name in names {
            let name = name.trim_start();
            let end = name
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            if parts.contains(&name[..end]) {
                used.insert(name[..end].to_string());
            }
        }
    }
    used
}

/// Part → the other parts it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    common::sources(src, &mut files);
    let parts: BTreeSet<String> = files
        .iter()
        .map(|f| part_of(src, f))
        .filter(|p| p != "lib" && p != "main")
        .collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let part = part_of(src, file);
        if !parts.contains(&part) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut used = uses_of(&code, &parts);
        used.remove(&part);
        uses.entry(part).or_default().extend(used);
    }
    uses
}

/// A circle of uses, if there is one: each part uses the next, the last
/// the first.
fn circle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth first; a part met again while on the path closes a circle.
    fn visit(
        part: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == part) {
            return Some(path[at..].to_vec());
        }
        if done.contains(part) {
            return None;
        }
        path.push(part.to_string());
        for next in uses.get(part).into_iter().flatten() {
            if let Some(found) = visit(next, uses, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(part.to_string());
        None
    }
    let mut done = BTreeSet::new();
    uses.keys()
        .find_map(|part| visit(part, uses, &mut Vec::new(), &mut done))
}

#[test]
fn the_parts_import_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let uses = graph(&src);
    assert!(uses.len() > 30, "{} parts", uses.len());
    // The reading sees the uses it must see.
    assert!(uses["state"].contains("admission"), "{uses:?}");
    assert!(uses["waiting"].contains("keyed"), "{uses:?}");
    if let Some(circle) = circle(&uses) {
        panic!(
            "the parts import in a circle: {} → {}",
            circle.join(" → "),
            circle[0]
        );
    }
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let parts: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let code = "use crate::{b::X, c};\n// crate::a\nfn f() { crate::a::g() }\n";
    assert_eq!(
        uses_of(code, &parts),
        ["a", "b", "c"].map(String::from).into()
    );
    let mut uses = BTreeMap::new();
    uses.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    uses.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    uses.insert("c".to_string(), BTreeSet::new());
    assert_eq!(circle(&uses), None);
    uses.get_mut("c").unwrap().insert("a".to_string());
    assert_eq!(
        circle(&uses),
        Some(["a", "b", "c"].map(String::from).to_vec())
    );
}

/// A file's module path below `src/`: `jobs/pool.rs` is `jobs::pool`,
/// `jobs/hooks/mod.rs` is `jobs::hooks`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        path.pop();
    }
    path
}

/// The module paths `code` names from `module`: each `crate::a::b` and
/// `super::a::b`, and each head of a group after one (`super::{a, b::c}`
/// names `a` and `b`).
fn paths_named(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        s[..end].to_string()
    };
    let mut named = Vec::new();
    for root in ["crate::", "super::"] {
        for (at, _) in code.match_indices(root) {
            if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // `super` is the module's parent, from a file and from a `mod.rs`.
            let mut path: Vec<String> = match root {
                "crate::" => Vec::new(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[at + root.len()..];
            loop {
                if let Some(group) = rest.strip_prefix('{') {
                    for head in group_heads(group) {
                        let mut p = path.clone();
                        p.push(ident(head.trim_start()));
                        named.push(p);
                    }
                    break;
                }
                let name = ident(rest);
                if name.is_empty() {
                    named.push(path);
                    break;
                }
                path.push(name.clone());
                rest = &rest[name.len()..];
                match rest.strip_prefix("::") {
                    Some(more) => rest = more,
                    None => {
                        named.push(path);
                        break;
                    }
                }
            }
        }
    }
    named
}

/// File → the other files it uses, by module path; a file's use of a
/// folder it is in (that folder's `mod.rs`, which declares it) is not
/// counted.
fn file_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    common::sources(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let entry = uses.entry(module.join("::")).or_default();
        for mut path in paths_named(&code, &module) {
            while !path.is_empty() && !modules.contains(&path) {
                path.pop();
            }
            let ancestor = path.len() < module.len() && module[..path.len()] == path[..];
            if !path.is_empty() && path != module && !ancestor {
                entry.insert(path.join("::"));
            }
        }
    }
    uses
}

#[test]
fn the_files_import_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let uses = file_graph(&src);
    // The reading sees the uses it must see.
    assert!(uses["jobs::pool"].contains("jobs::hooks"), "{uses:?}");
    assert!(
        uses["jobs::hooks::pacing"].contains("jobs::parts"),
        "{uses:?}"
    );
    assert!(uses["jobs::gate"].contains("jobs::overload"), "{uses:?}");
    assert!(uses["pace::budgets"].contains("budget"), "{uses:?}");
    if let Some(circle) = circle(&uses) {
        panic!(
            "the files import in a circle: {} → {}",
            circle.join(" → "),
            circle[0]
        );
    }
}

#[test]
fn a_circle_of_files_is_found_where_there_is_one() {
    let module = ["jobs".to_string(), "gate".to_string()];
    let code = "use super::overload::{Overloads, Scope};\nuse crate::pace::{Behind, Stage};\n\
                fn f() { crate::jobs::quota::x(); super::slots::y() }\n";
    let named: Vec<String> = paths_named(code, &module)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    for want in [
        "pace::Behind",
        "jobs::quota::x",
        "jobs::overload::Overloads",
        "jobs::slots::y",
    ] {
        assert!(named.iter().any(|n| n == want), "{want} in {named:?}");
    }
    // Before the overload books moved below the gate, the two named each
    // other: a circle.
    let mut uses = BTreeMap::new();
    uses.insert(
        "jobs::gate".to_string(),
        BTreeSet::from(["jobs::overload".to_string()]),
    );
    uses.insert(
        "jobs::overload".to_string(),
        BTreeSet::from(["jobs::gate".to_string()]),
    );
    assert!(circle(&uses).is_some());
}

/// The types `code` declares at any depth outside its unit tests: each
/// `struct`, `enum`, `trait` and `type` alias (not an associated type, a
/// `type` indented inside an `impl` or a trait).
fn types_declared(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code.lines() {
        let mut rest = line.trim_start();
        // The visibility: `pub`, `pub(crate)`, `pub(in crate::x)`.
        if let Some(after) = rest.strip_prefix("pub(") {
            rest = after.split_once(')').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("pub ") {
            rest = after.trim_start();
        }
        rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
        let Some((keyword, after)) = rest.split_once(' ') else {
            continue;
        };
        let associated = keyword == "type" && line.starts_with(' ');
        if ["struct", "enum", "trait", "type"].contains(&keyword) && !associated {
            let end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            names.push(after[..end].to_string());
        }
    }
    names
}

#[test]
fn each_type_name_is_declared_once() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    common::sources(&src, &mut files);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for name in types_declared(&code) {
            let at = file.strip_prefix(&src).unwrap().display().to_string();
            seen.entry(name).or_default().push(at);
        }
    }
    assert!(
        seen.contains_key("Pace") && seen.contains_key("Section"),
        "{seen:?}"
    );
    let twice: Vec<_> = seen.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "type names declared more than once: {twice:?}"
    );
}

#[test]
fn a_type_declared_twice_is_seen() {
    let code = "pub(crate) struct A {\n}\nenum B { X }\nimpl I for A {\n    type Target = B;\n}\npub(in crate::x) trait C {}\ntype D = u8;\n";
    assert_eq!(types_declared(code), ["A", "B", "C", "D"]);
}

/// The functions of `code` with their length in lines, from the `fn`
/// line to the closing brace at its indentation (a declaration without a
/// body, in a trait, is none).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let modifiers = ["pub", "async", "const", "unsafe", "extern"];
        if !words[..at]
            .iter()
            .all(|w| modifiers.iter().any(|m| w.starts_with(m)))
        {
            continue;
        }
        let name: String = words
            .get(at + 1)
            .map_or("", |w| w)
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body opens on the first line ending in `{`, unless a `;`
        // ends the declaration first.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            found.push((name, end - i + 1));
        }
    }
    found
}

#[test]
fn no_function_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    common::sources(&src, &mut files);
    let mut long = Vec::new();
    let mut seen = 0;
    for file in &files {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for (name, lines) in function_lengths(&code) {
            seen += 1;
            if lines > 80 {
                long.push(format!("{}: {name} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(seen > 1000, "{seen} functions read");
    assert!(long.is_empty(), "functions over 80 lines: {long:?}");
}

#[test]
fn a_function_is_measured_from_fn_to_its_brace() {
    let code = "pub(crate) fn a() {\n    x();\n}\ntrait T {\n    fn b(&self);\n    fn c(&self) {\n    }\n}\n";
    assert_eq!(
        function_lengths(code),
        [("a".to_string(), 3), ("c".to_string(), 2)]
    );
}
