//! Completions and the man page are generated from the CLI definition and
//! checked in. These tests regenerate them and fail when the checked-in
//! files have drifted; run with `DRIP_REGENERATE=1` to rewrite them.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{roman, Roff};
use drip::cli::{Cli, EXAMPLES, EXIT_STATUSES};

fn check(path: &Path, generated: &[u8]) {
    if std::env::var_os("DRIP_REGENERATE").is_some() {
        std::fs::write(path, generated).unwrap();
        return;
    }
    let current = std::fs::read(path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is out of date with the CLI: run `DRIP_REGENERATE=1 cargo test --test generated`",
        path.display()
    );
}

fn completions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("completions")
}

#[test]
fn completions_match_the_cli() {
    for (shell, file) in [
        (Shell::Bash, "drip.bash"),
        (Shell::Zsh, "_drip"),
        (Shell::Fish, "drip.fish"),
        (Shell::Elvish, "drip.elv"),
        (Shell::PowerShell, "_drip.ps1"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "drip", &mut out);
        check(&completions_dir().join(file), &out);
    }
}

/// The man page: clap_mangen's sections, with EXAMPLES and EXIT STATUS.
fn man_page() -> Vec<u8> {
    let cmd = Cli::command().after_help("");
    let man = clap_mangen::Man::new(cmd)
        .date("")
        .source(format!("drip {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    man.render_synopsis_section(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    let mut roff = Roff::default();
    roff.control("SH", ["EXAMPLES"]);
    for (command, what) in EXAMPLES {
        roff.control("TP", []);
        roff.text([roman(*command)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in EXIT_STATUSES {
        roff.control("TP", []);
        roff.text([roman(*status)]);
        roff.text([roman(*meaning)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman("pv(1), xargs(1), parallel(1), mbuffer(1)")]);
    roff.to_writer(&mut out).unwrap();
    man.render_version_section(&mut out).unwrap();
    out
}

#[test]
fn man_page_matches_the_cli() {
    check(&completions_dir().join("drip.1"), &man_page());
}

#[test]
fn man_page_has_examples_and_exit_status() {
    let text = String::from_utf8(man_page()).unwrap();
    assert!(text.contains(".SH EXAMPLES"));
    assert!(text.contains(".SH \"EXIT STATUS\"") || text.contains(".SH EXIT STATUS"));
    assert!(text.contains("overflowed under"));
}
