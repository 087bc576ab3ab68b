//! Completions and the man page are generated from the CLI definition and
//! checked in. These tests regenerate them and fail when the checked-in
//! files have drifted; run with `DRIP_REGENERATE=1` to rewrite them. They
//! also run the bash, fish and zsh completions for real, and show the page
//! with man: without fish, zsh, tmux, bash-completion, git or man the tests
//! that need them say so and pass, except under `DRIP_REQUIRE_TOOLS=1`
//! (`common::have`; CI installs them all).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::builder::ValueHint;
use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use drip::testing::{
    Paragraph, CONTROL, DESCRIPTION, ENVIRONMENT, EXAMPLES, EXIT_PRECEDENCE, EXIT_STATUSES, FILES,
    SEE_ALSO, SIGNALS,
};
use drip::Cli;

fn check(path: &Path, generated: &[u8]) {
    if std::env::var_os("DRIP_REGENERATE").is_some() {
        std::fs::write(path, generated).unwrap();
        return;
    }
    let current = std::fs::read(path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is out of date with the CLI: run `DRIP_REGENERATE=1 cargo test --test suite generated::`",
        path.display()
    );
}

fn completions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("completions")
}

/// The options that take a value, as (flags, fixed values, takes a file).
fn valued_options() -> Vec<(Vec<String>, Vec<String>, bool)> {
    let mut cmd = Cli::command();
    cmd.build();
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && a.get_num_args().is_some_and(|n| n.takes_values()))
        .map(|a| {
            let mut flags = Vec::new();
            if let Some(s) = a.get_short() {
                flags.push(format!("-{s}"));
            }
            if let Some(l) = a.get_long() {
                flags.push(format!("--{l}"));
            }
            let values = a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            (flags, values, a.get_value_hint() == ValueHint::FilePath)
        })
        .collect()
}

/// clap_complete's elvish script completes flags only: complete the value
/// of the option just typed instead (its fixed values, file names, or
/// nothing for a free-form value), and add file names where a FILE goes.
/// (Elvish's `return` leaves only a `fn`, hence the one if-elif chain.)
fn elvish_values(script: String) -> String {
    let mut block = String::from(
        "    var prev = ''\n    if (> (count $words) 2) {\n        set prev = $words[-2]\n    }\n    if $false {\n",
    );
    for (flags, values, file) in valued_options() {
        let test = flags
            .iter()
            .map(|f| format!("(eq $prev {f})"))
            .collect::<Vec<_>>()
            .join(" ");
        block.push_str(&format!("    }} elif (or {test}) {{\n"));
        if file {
            block.push_str("        edit:complete-filename $words[-1]\n");
        }
        for v in values {
            block.push_str(&format!("        put {v}\n"));
        }
    }
    block.push_str("    } else {\n");
    block.push_str(
        "        if (not (str:has-prefix $words[-1] '-')) {\n            edit:complete-filename $words[-1]\n        }\n",
    );
    block.push_str("        $completions[$command]\n    }\n}");
    let anchor = "    $completions[$command]\n}";
    assert!(script.contains(anchor), "elvish script changed shape");
    script.replacen(anchor, &block, 1)
}

/// clap_complete's PowerShell script completes flags only: complete the
/// value of the option just typed with its fixed values, and return nothing
/// after an option that takes a file (PowerShell then completes paths).
fn powershell_values(script: String) -> String {
    let mut block = String::from(
        "    $words = @($commandElements | ForEach-Object { $_.ToString() })\n    \
         $previous = if ($wordToComplete -eq '' -or $words.Count -lt 2) { $words[-1] } else { $words[-2] }\n    \
         switch ($previous) {\n",
    );
    for (flags, values, _file) in valued_options() {
        let flags = flags
            .iter()
            .map(|f| format!("'{f}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let values = values
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(", ");
        block.push_str(&format!(
            "        {{ $_ -in {flags} }} {{\n            @({values}) | Where-Object {{ $_ -like \"$wordToComplete*\" }} | \
             ForEach-Object {{ [CompletionResult]::new($_, $_, [CompletionResultType]::ParameterValue, $_) }}\n            \
             return\n        }}\n"
        ));
    }
    block.push_str("    }\n\n");
    let anchor = "    $completions = @(switch ($command) {";
    assert!(script.contains(anchor), "PowerShell script changed shape");
    script.replacen(anchor, &format!("{block}{anchor}"), 1)
}

/// clap_complete's fish script takes any word after the options for a
/// subcommand, and gives up on the options once a value is missing: drip
/// has two subcommands, `ctl` and `take`, only as the first word (a file
/// named `ctl` elsewhere is a file), so say exactly that.
fn fish_subcommand(script: String) -> String {
    let start = script
        .find("function __fish_drip_needs_command")
        .expect("fish script changed shape");
    let end = start
        + script[start..]
            .find("\nend\n")
            .expect("fish script changed shape")
        + 5;
    let own = "function __fish_drip_needs_command\n    \
               # drip ctl, drip take: the first word only.\n    \
               set -l cmd (commandline -opc)\n    \
               if test (count $cmd) -ge 2; and contains -- \"$cmd[2]\" ctl take\n        \
               echo $cmd[2]\n        \
               return 1\n    \
               end\n    \
               return 0\n\
               end\n";
    format!("{}{own}{}", &script[..start], &script[end..])
}

/// `--exec` takes the rest of the line, or up to a `;`: a command, then
/// its own arguments. clap_complete's bash script completes a file there,
/// and drip's flags after it: complete a command name after `--exec`, and
/// after that the command's own completion (bash-completion's
/// `_command_offset`, as for sudo), or else file names.
fn bash_exec(script: String) -> String {
    let anchor = "    COMPREPLY=()\n";
    assert!(script.contains(anchor), "bash script changed shape");
    let block = r#"    COMPREPLY=()

    # --exec COMMAND...: the rest of the line (or up to a ;) is a command.
    local exec_at=0 j
    for (( j = 1; j < COMP_CWORD; j++ )); do
        case "${COMP_WORDS[j]}" in
            --exec) [[ ${exec_at} -eq 0 ]] && exec_at=${j} ;;
            ';'|'\;'|"';'"|'";"') exec_at=0 ;;
        esac
    done
    if [[ ${exec_at} -gt 0 ]]; then
        if declare -F _command_offset >/dev/null; then
            _command_offset $(( exec_at + 1 ))
        elif [[ $(( exec_at + 1 )) -eq ${COMP_CWORD} ]]; then
            COMPREPLY=( $(compgen -c -- "${COMP_WORDS[COMP_CWORD]}") )
        else
            COMPREPLY=( $(compgen -f -- "${COMP_WORDS[COMP_CWORD]}") )
        fi
        return 0
    fi
"#;
    script.replacen(anchor, block, 1)
}

/// The fish script: the words after `--exec` (up to a `;`) are a command
/// line of their own: no drip flag is offered there (every drip completion
/// asks `__fish_drip_needs_command`), a command name is, then what fish
/// completes for that command.
fn fish_exec(script: String) -> String {
    let anchor = "function __fish_drip_needs_command\n";
    assert!(script.contains(anchor), "fish script changed shape");
    let functions = "function __fish_drip_exec_words\n    \
                     # The words after --exec (up to a ;), when the word being completed is one.\n    \
                     set -l cmd (commandline -opc)\n    \
                     set -l at 0\n    \
                     for i in (seq 2 (count $cmd))\n        \
                     if test $at -eq 0; and test \"$cmd[$i]\" = --exec\n            \
                     set at $i\n        \
                     else if test \"$cmd[$i]\" = ';'\n            \
                     set at 0\n        \
                     end\n    \
                     end\n    \
                     test $at -gt 0; or return 1\n    \
                     if test (count $cmd) -gt $at\n        \
                     printf '%s\\n' $cmd[(math $at + 1)..-1]\n    \
                     end\n    \
                     return 0\n\
                     end\n\n\
                     function __fish_drip_exec_complete\n    \
                     set -l words (__fish_drip_exec_words)\n    \
                     if test (count $words) -eq 0\n        \
                     __fish_complete_command\n    \
                     else\n        \
                     set -l line (string join ' ' -- (string escape -- $words))\n        \
                     set -l current (commandline -ct)\n        \
                     complete -C \"$line $current\"\n    \
                     end\n\
                     end\n\n";
    let own = "function __fish_drip_needs_command\n    \
               # Not inside --exec's command line.\n    \
               __fish_drip_exec_words >/dev/null; and return 1\n";
    let script = script.replacen(anchor, &format!("{functions}{own}"), 1);
    format!(
        "{script}complete -c drip -n \"__fish_drip_exec_words >/dev/null\" -f -a \"(__fish_drip_exec_complete)\"\n"
    )
}

/// The zsh script: after `--exec`'s command name, the words up to a `;`
/// are that command's arguments, completed as zsh completes that command
/// (`_normal`), as zsh's own `find -exec` does.
fn zsh_exec(script: String) -> String {
    let anchor = ":COMMAND:_command_names -e' \\\n";
    assert!(script.contains(anchor), "zsh script changed shape");
    script.replacen(
        anchor,
        ":COMMAND:_command_names -e:*\\;::command arguments:_normal' \\\n",
        1,
    )
}

/// The running drips' pids and names, one a line, as `drip ctl list`
/// gives them (its JSON cut at each `{`, `,` and `}`; a name is letters,
/// digits, `_` and `-`), after the drip command in `$1`, `$words[1]` or
/// `$cmd[1]`: the same pipe in bash, zsh and fish.
fn ctl_targets(drip: &str) -> String {
    format!(
        r#"command {drip} ctl list 2>/dev/null | tr '{{,}}' '\n\n\n' | sed -n 's/^"pid":\([0-9]*\)$/\1/p; s/^"name":"\([A-Za-z0-9_-]*\)"$/\1/p'"#
    )
}

/// What `drip ctl TARGET` may be asked, for completion.
const CTL_COMMANDS: &str =
    "info stats keys jobs pause resume rate byte-rate cost-rate key-rate -j key-jobs";

/// `drip ctl` in bash: clap_complete's script offers `-h --help` after
/// `ctl` (and files, by `-o default`). Complete `list` and the running
/// drips' pids and names there, then the commands, and nothing after.
fn bash_ctl(script: String) -> String {
    let anchor = "    if [[ \"${BASH_VERSINFO[0]}\" -ge 4 ]]; then\n        cur=\"$2\"";
    assert!(script.contains(anchor), "bash script changed shape");
    let block = format!(
        r#"    # drip ctl: list or a running drip (its pid or --name), then what to do.
    if [[ ${{COMP_CWORD}} -ge 2 && "${{COMP_WORDS[1]}}" == ctl ]]; then
        compopt +o default +o bashdefault 2>/dev/null
        local word="${{COMP_WORDS[COMP_CWORD]}}"
        if [[ ${{COMP_CWORD}} -eq 2 ]]; then
            COMPREPLY=( $(compgen -W "list $({targets})" -- "${{word}}") )
        elif [[ ${{COMP_CWORD}} -eq 3 && "${{COMP_WORDS[2]}}" != list ]]; then
            COMPREPLY=( $(compgen -W "{CTL_COMMANDS}" -- "${{word}}") )
        fi
        return 0
    fi
"#,
        targets = ctl_targets("\"$1\"")
    );
    script.replacen(anchor, &format!("{block}{anchor}"), 1)
}

/// `drip ctl` in zsh: clap_complete's script takes `ctl` for the FILE
/// and offers `ctl` again. Complete `list` and the running drips' pids
/// and names after `ctl`, then the commands, and nothing after.
fn zsh_ctl(script: String) -> String {
    let anchor = "    local ret=1\n";
    assert!(script.contains(anchor), "zsh script changed shape");
    let block = format!(
        r#"    local ret=1

    # drip ctl: list or a running drip (its pid or --name), then what to do.
    if (( CURRENT > 2 )) && [[ $words[2] == ctl ]]; then
        if (( CURRENT == 3 )); then
            local -a targets
            targets=(list $({targets}))
            compadd -a targets
        elif (( CURRENT == 4 )) && [[ $words[3] != list ]]; then
            compadd -- {CTL_COMMANDS}
        fi
        return
    fi
"#,
        targets = ctl_targets("$words[1]")
    );
    script.replacen(anchor, &block, 1)
}

/// `drip ctl` in fish: clap_complete's script offers file names after
/// `ctl`. Complete `list` and the running drips' pids and names there,
/// then the commands, and nothing after (no file names anywhere).
fn fish_ctl(script: String) -> String {
    let function = format!(
        r#"
function __fish_drip_ctl_words
    # drip ctl: list or a running drip (its pid or --name), then what to do.
    set -l cmd (commandline -opc)
    if test (count $cmd) -eq 2
        echo list
        {targets}
    else if test (count $cmd) -eq 3; and test "$cmd[3]" != list
        printf '%s\n' {CTL_COMMANDS}
    end
end
complete -c drip -n "__fish_drip_using_subcommand ctl" -f -a "(__fish_drip_ctl_words)"
"#,
        targets = ctl_targets("$cmd[1]")
    );
    format!("{script}{function}")
}

fn completion(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "drip", &mut out);
    let text = String::from_utf8(out).unwrap();
    let text = match shell {
        Shell::Elvish => elvish_values(text),
        Shell::PowerShell => powershell_values(text),
        Shell::Fish => fish_ctl(fish_exec(fish_subcommand(text))),
        Shell::Bash => bash_ctl(bash_exec(text)),
        Shell::Zsh => zsh_ctl(zsh_exec(text)),
        _ => text,
    };
    text.into_bytes()
}

const SHELLS: [(Shell, &str); 5] = [
    (Shell::Bash, "drip.bash"),
    (Shell::Zsh, "_drip"),
    (Shell::Fish, "drip.fish"),
    (Shell::Elvish, "drip.elv"),
    (Shell::PowerShell, "_drip.ps1"),
];

#[test]
fn completions_match_the_cli() {
    for (shell, file) in SHELLS {
        check(&completions_dir().join(file), &completion(shell));
    }
}

const POLICIES: [&str; 4] = ["block", "drop-newest", "drop-oldest", "fail"];

#[test]
fn every_shell_completes_the_policies() {
    for (shell, _) in SHELLS {
        let text = String::from_utf8(completion(shell)).unwrap();
        for policy in POLICIES {
            let offered = match shell {
                Shell::Bash => text.contains("compgen -W \"block drop-newest drop-oldest fail\""),
                Shell::Zsh => text.contains(&format!("{policy}\\:\"")),
                Shell::Fish => text.contains(&format!("{policy}\\t")),
                Shell::Elvish => text.contains(&format!("put {policy}\n")),
                _ => text.contains(&format!("'{policy}'")),
            };
            assert!(offered, "{shell}: {policy} not offered");
        }
    }
}

/// `$PATH` with the drip under test first, for the scripts that run it
/// (`drip ctl list`, for `drip ctl`'s targets).
fn path_with_drip() -> std::ffi::OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_drip")).parent().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)))
        .unwrap()
}

/// A drip named `name` running with its control socket under `dir` (as
/// `XDG_RUNTIME_DIR`), until dropped.
struct Named(std::process::Child);

impl Named {
    fn start(dir: &Path, name: &str) -> Named {
        let child = Command::new(env!("CARGO_BIN_EXE_drip"))
            .args(["-r", "1/s", "-q", "--name", name])
            .env("XDG_RUNTIME_DIR", dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let socket = dir.join("drip").join(format!("{}.{name}.ctl", child.id()));
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !socket.exists() {
            assert!(std::time::Instant::now() < until, "no control socket");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Named(child)
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run bash's completion of `line` (which ends where Tab is pressed) in
/// `dir`, which holds the script.
fn bash_complete(line: &str, dir: &Path) -> Vec<String> {
    let script = format!(
        "source drip.bash; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; \
         read -ra COMP_WORDS <<< \"$COMP_LINE\"; \
         case \"$COMP_LINE\" in *' ') COMP_WORDS+=('');; esac; \
         COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); \
         _drip drip \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir)
        .env("PATH", path_with_drip())
        .env("XDG_RUNTIME_DIR", dir)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Run fish's completion of `line` in `dir`, which holds the script.
fn fish_complete(line: &str, dir: &Path) -> Vec<String> {
    let script = format!("source drip.fish; complete -C '{line}'");
    let out = Command::new("fish")
        .args(["--no-config", "-c", &script])
        .current_dir(dir)
        .env("PATH", path_with_drip())
        .env("XDG_RUNTIME_DIR", dir)
        .output()
        .expect("fish");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect()
}

#[test]
fn bash_and_fish_complete_values_and_files() {
    if !common::have(&["fish"]) {
        return;
    }
    // The scripts as generated (the same as the checked-in ones, which
    // completions_match_the_cli may be rewriting meanwhile).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("input.txt"), "x\n").unwrap();
    std::fs::write(dir.path().join("drip.bash"), completion(Shell::Bash)).unwrap();
    std::fs::write(dir.path().join("drip.fish"), completion(Shell::Fish)).unwrap();
    for complete in [bash_complete, fish_complete] {
        // A policy, not a file name.
        assert_eq!(complete("drip --overflow ", dir.path()), POLICIES);
        assert_eq!(
            complete("drip -o drop-", dir.path()),
            ["drop-newest", "drop-oldest"]
        );
        // Files where a file goes.
        assert_eq!(complete("drip --stats-json in", dir.path()), ["input.txt"]);
        assert_eq!(complete("drip --dead-letter in", dir.path()), ["input.txt"]);
        // A rate is no file name.
        assert!(!complete("drip --rate in", dir.path()).contains(&"input.txt".to_string()));
        // drip ctl, first; options after a file.
        assert!(complete("drip ct", dir.path()).contains(&"ctl".to_string()));
        assert_eq!(
            complete("drip input.txt --overf", dir.path()),
            ["--overflow"]
        );
    }
}

#[test]
fn bash_and_fish_complete_ctl_with_running_drips_then_commands() {
    if !common::have(&["fish"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("input.txt"), "x\n").unwrap();
    std::fs::write(dir.path().join("drip.bash"), completion(Shell::Bash)).unwrap();
    std::fs::write(dir.path().join("drip.fish"), completion(Shell::Fish)).unwrap();
    let drip = Named::start(dir.path(), "zznamed");
    let pid = drip.0.id().to_string();
    let commands: Vec<&str> = CTL_COMMANDS.split(' ').collect();
    for complete in [bash_complete, fish_complete] {
        let sorted = |line: &str| {
            let mut offered = complete(line, dir.path());
            offered.sort();
            offered
        };
        // list and the running drip, by pid and by name; no flag, no file.
        let mut targets = vec!["list", pid.as_str(), "zznamed"];
        targets.sort();
        assert_eq!(sorted("drip ctl "), targets);
        assert_eq!(complete("drip ctl zz", dir.path()), ["zznamed"]);
        assert_eq!(complete("drip ctl li", dir.path()), ["list"]);
        // Then what to ask it.
        let mut all = commands.clone();
        all.sort();
        assert_eq!(sorted("drip ctl zznamed "), all);
        assert_eq!(
            complete(&format!("drip ctl {pid} pa"), dir.path()),
            ["pause"]
        );
        assert_eq!(sorted("drip ctl zznamed r"), ["rate", "resume"]);
        // Nothing after list, or as a value.
        assert_eq!(complete("drip ctl list ", dir.path()), Vec::<String>::new());
        let offered = complete("drip ctl zznamed rate ", dir.path());
        assert!(offered.is_empty(), "{offered:?}");
    }
}

#[test]
fn bash_and_fish_complete_a_command_after_exec() {
    if !common::have(&["fish"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("input.txt"), "x\n").unwrap();
    std::fs::write(dir.path().join("drip.bash"), completion(Shell::Bash)).unwrap();
    std::fs::write(dir.path().join("drip.fish"), completion(Shell::Fish)).unwrap();
    for complete in [bash_complete, fish_complete] {
        // A command name right after --exec, not a file or a flag.
        let offered = complete("drip -r 5/s --exec ech", dir.path());
        assert!(offered.contains(&"echo".to_string()), "{offered:?}");
        assert!(offered.iter().all(|w| !w.starts_with('-')), "{offered:?}");
        // Then the command's arguments: never drip's flags.
        for line in ["drip --exec ls --ra", "drip --exec ls -l -"] {
            let offered = complete(line, dir.path());
            assert!(
                !offered.iter().any(|w| w == "--rate" || w == "--retries"),
                "{line}: {offered:?}"
            );
        }
        let offered = complete("drip --exec cat in", dir.path());
        assert!(offered.contains(&"input.txt".to_string()), "{offered:?}");
        // After a lone ;, drip's own flags again.
        assert_eq!(
            complete("drip --exec cat \\; --overf", dir.path()),
            ["--overflow"]
        );
    }
}

/// A zsh in a terminal (tmux, on a private server) with the generated
/// script on its `$fpath` and completion on, in `dir`; killed on drop.
struct Zsh {
    socket: PathBuf,
}

impl Zsh {
    /// Started (zsh and tmux are here: `common::have`).
    fn start(dir: &Path) -> Zsh {
        let socket = dir.join("tmux.sock");
        let path = format!("PATH={}:/usr/bin:/bin", dir.display());
        let home = format!("HOME={}", dir.display());
        // Not `dir` itself: `dir/drip` may be the drip under test.
        let runtime = format!("XDG_RUNTIME_DIR={}", dir.join("run").display());
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "150",
                "-y",
                "30",
            ])
            .args([
                "env",
                "-i",
                &path,
                &home,
                "TERM=xterm-256color",
                &runtime,
                "zsh",
                "-f",
            ])
            .status()
            .expect("tmux");
        assert!(status.success(), "tmux failed to start");
        let zsh = Zsh { socket };
        let setup = format!(
            "fpath=({} $fpath); autoload -U compinit; compinit -u -D; PS1='%% '",
            dir.display()
        );
        zsh.keys(&["-l", &setup]);
        zsh.keys(&["Enter"]);
        zsh
    }

    fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("send-keys")
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The last command line on the screen.
    fn line(&self) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["capture-pane", "-p"])
            .output()
            .unwrap();
        let screen = String::from_utf8(out.stdout).unwrap();
        let line = screen.lines().rfind(|l| l.starts_with("% "));
        line.unwrap_or_default().trim_end().to_string()
    }

    /// Type `typed`, press Tab, and give completion `wait`: the command
    /// line then. The line is cleared before and after.
    fn complete(&self, typed: &str, wait: std::time::Duration) -> String {
        self.keys(&["C-u"]);
        self.keys(&["-l", typed]);
        self.keys(&["Tab"]);
        let start = std::time::Instant::now();
        let mut line = self.line();
        while start.elapsed() < wait {
            std::thread::sleep(std::time::Duration::from_millis(50));
            line = self.line();
            // A line still being echoed is a prefix of what was typed:
            // only one that is not (completion changed it) ends the wait.
            if !line.is_empty() && !format!("% {typed}").starts_with(&line) {
                break;
            }
        }
        self.keys(&["C-u"]);
        line
    }
}

impl Drop for Zsh {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

#[test]
fn zsh_completes_a_command_after_exec() {
    use std::os::unix::fs::PermissionsExt;
    if !common::have(&["zsh", "tmux"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("_drip"), completion(Shell::Zsh)).unwrap();
    let command = dir.path().join("zzdripcmd");
    std::fs::write(&command, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&command, std::fs::Permissions::from_mode(0o755)).unwrap();
    let zsh = Zsh::start(dir.path());
    let long = std::time::Duration::from_secs(10);
    // Completion works: drip's flags where they go.
    let line = zsh.complete("drip --overf", long);
    assert!(line.starts_with("% drip --overflow"), "{line}");
    // A command name after --exec.
    let line = zsh.complete("drip -r 5/s --exec zzdripc", long);
    assert_eq!(line, "% drip -r 5/s --exec zzdripcmd");
    // Its arguments are its own: no drip flag.
    let short = std::time::Duration::from_millis(1500);
    assert_eq!(
        zsh.complete("drip --exec zzdripcmd --overf", short),
        "% drip --exec zzdripcmd --overf"
    );
}

#[test]
fn zsh_completes_ctl_with_running_drips_then_commands() {
    if !common::have(&["zsh", "tmux"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("_drip"), completion(Shell::Zsh)).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_drip"), dir.path().join("drip")).unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let _drip = Named::start(&runtime, "zznamed");
    let zsh = Zsh::start(dir.path());
    let long = std::time::Duration::from_secs(10);
    // Completion works at all: drip's flags where they go.
    let line = zsh.complete("drip --overf", long);
    assert!(line.starts_with("% drip --overflow"), "{line}");
    assert_eq!(zsh.complete("drip ctl zzn", long), "% drip ctl zznamed");
    assert_eq!(zsh.complete("drip ctl li", long), "% drip ctl list");
    assert_eq!(
        zsh.complete("drip ctl zznamed pau", long),
        "% drip ctl zznamed pause"
    );
    // Nothing after list: the line stays.
    let short = std::time::Duration::from_millis(1500);
    assert_eq!(zsh.complete("drip ctl list ", short), "% drip ctl list");
}

#[test]
fn bash_hands_the_command_after_exec_to_its_own_completion() {
    // With bash-completion loaded, as in an interactive shell, the words
    // after --exec are completed as that command's (_command_offset).
    if !common::have(&["bash-completion", "git"]) {
        return;
    }
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    let dir = tempfile::tempdir().unwrap();
    let mut script = format!("source {} 2>/dev/null\n", loader.display()).into_bytes();
    script.extend(completion(Shell::Bash));
    std::fs::write(dir.path().join("drip.bash"), script).unwrap();
    let offered = bash_complete("drip -r 5/s --exec git chec", dir.path());
    let offered: Vec<&str> = offered.iter().map(|w| w.trim_end()).collect();
    assert_eq!(offered, ["checkout"]);
    assert_eq!(
        bash_complete("drip --exec git \\; --overf", dir.path()),
        ["--overflow"]
    );
}

#[test]
fn zsh_completes_the_arguments_after_exec_as_a_command_line() {
    // zsh's own find -exec: the command name, then its arguments up to a ;.
    let text = String::from_utf8(completion(Shell::Zsh)).unwrap();
    let exec = text
        .lines()
        .find(|l| l.starts_with("'*--exec=["))
        .expect("--exec in the zsh script");
    assert!(
        exec.ends_with(":COMMAND:_command_names -e:*\\;::command arguments:_normal' \\"),
        "{exec}"
    );
}

/// `[-r|--rate RATE]`, `[--drain]`, `[FILE]...`: the synopsis with value
/// names (clap_mangen's leaves them out).
fn synopsis(roff: &mut Roff) {
    let mut cmd = Cli::command();
    cmd.build();
    let mut line: Vec<Inline> = vec![bold("drip")];
    // Options first, then the operands.
    let mut args: Vec<_> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    args.sort_by_key(|a| a.is_positional());
    for arg in args {
        line.push(roman(" ["));
        if arg.is_positional() {
            let name = arg.get_value_names().unwrap()[0].to_string();
            line.push(italic(name));
            line.push(roman("]..."));
            continue;
        }
        let flags: Vec<String> = arg
            .get_short()
            .map(|s| format!("-{s}"))
            .into_iter()
            .chain(arg.get_long().map(|l| format!("--{l}")))
            .collect();
        for (i, flag) in flags.iter().enumerate() {
            if i > 0 {
                line.push(roman("|"));
            }
            line.push(bold(flag.as_str()));
        }
        if arg.get_num_args().is_some_and(|n| n.takes_values()) {
            let name = arg.get_value_names().unwrap()[0].to_string();
            line.push(roman(" "));
            line.push(italic(name));
        }
        line.push(roman("]"));
    }
    roff.control("SH", ["SYNOPSIS"]);
    roff.text(line);
    for sub in cmd.get_subcommands() {
        let mut line = vec![bold(format!("drip {}", sub.get_name()))];
        for arg in sub.get_arguments().filter(|a| a.is_positional()) {
            let name = arg.get_value_names().unwrap()[0].to_string();
            line.push(roman(" ["));
            line.push(italic(name));
            line.push(roman(
                if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
                    "]..."
                } else {
                    "]"
                },
            ));
        }
        roff.control("br", []);
        roff.text(line);
    }
}

/// Tagged paragraphs (`.TP`), or plain ones (`.PP`) where the tag is empty.
fn paragraphs(roff: &mut Roff, items: &[Paragraph]) {
    for (tag, text) in items {
        if tag.is_empty() {
            roff.control("PP", []);
        } else {
            roff.control("TP", []);
            roff.text([bold(*tag)]);
        }
        roff.text([roman(*text)]);
    }
}

/// The man page: NAME, SYNOPSIS, DESCRIPTION, OPTIONS (clap_mangen's),
/// SIGNALS, EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES, SEE ALSO.
fn man_page() -> Vec<u8> {
    let cmd = Cli::command().after_help("");
    let man = clap_mangen::Man::new(cmd.clone())
        .date("")
        .source(format!("drip {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    let mut roff = Roff::default();
    synopsis(&mut roff);
    roff.control("SH", ["DESCRIPTION"]);
    let about = cmd.get_long_about().unwrap().to_string();
    for para in about.split("\n\n").skip(1) {
        roff.text([roman(para.replace('\n', " "))]);
        roff.control("PP", []);
    }
    for (title, items) in DESCRIPTION {
        if !title.is_empty() {
            roff.control("SS", [*title]);
        }
        paragraphs(&mut roff, items);
    }
    roff.to_writer(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    let mut roff = Roff::default();
    roff.control("SH", ["DRIP CTL"]);
    paragraphs(&mut roff, CONTROL);
    roff.control("SH", ["SIGNALS"]);
    paragraphs(&mut roff, SIGNALS);
    roff.control("SH", ["EXIT STATUS"]);
    paragraphs(&mut roff, EXIT_STATUSES);
    roff.control("PP", []);
    roff.text([roman(EXIT_PRECEDENCE)]);
    roff.control("SH", ["ENVIRONMENT"]);
    paragraphs(&mut roff, ENVIRONMENT);
    roff.control("SH", ["FILES"]);
    paragraphs(&mut roff, FILES);
    roff.control("SH", ["EXAMPLES"]);
    for (command, what) in EXAMPLES {
        roff.control("TP", []);
        roff.text([bold(*command)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(SEE_ALSO)]);
    roff.to_writer(&mut out).unwrap();
    man.render_version_section(&mut out).unwrap();
    portable(&code_spans(&String::from_utf8(out).unwrap())).into_bytes()
}

/// The help's Markdown code spans (`` `drip ctl` ``, `` `-` ``) in bold on
/// the page (`\fB...\fP`: back to the font before, so a span in a bold
/// tag stays bold), as the page's other commands and flags are: a backtick
/// is no quote in roff, and would show as it is.
fn code_spans(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    for line in page.split_inclusive('\n') {
        let parts: Vec<&str> = line.split('`').collect();
        if line.starts_with('.') || parts.len() % 2 == 0 {
            // A control line, or a backtick with no pair: as it is (and
            // man_page_shows_no_backticks says so).
            out.push_str(line);
            continue;
        }
        for (i, part) in parts.iter().enumerate() {
            if i % 2 == 1 {
                out.push_str(&format!("\\fB{part}\\fP"));
            } else {
                out.push_str(part);
            }
        }
    }
    out
}

/// Words longer than this (in the roff source) get places to break.
const LONG_WORD: usize = 30;

/// The page's text lines in ASCII, each character beyond it as a groff
/// escape (`\[u2014]`), so that no preprocessor need guess the encoding;
/// and long words (URLs, paths) given places to break after a `/`, `,`,
/// `&`, `|` or `?` (`\:`, a break point that prints nothing), so that an
/// 80-column page can fill its lines without a warning.
fn portable(page: &str) -> String {
    let ascii = |c: char| {
        if c.is_ascii() {
            c.to_string()
        } else {
            format!("\\[u{:04X}]", c as u32)
        }
    };
    let mut out = String::with_capacity(page.len());
    for line in page.split_inclusive('\n') {
        if line.starts_with('.') || line.starts_with('\'') {
            out.extend(line.chars().map(ascii));
            continue;
        }
        let words = line.split(' ').map(|word| {
            let long = word.len() > LONG_WORD;
            let mut text = String::new();
            let mut chars = word.chars().peekable();
            while let Some(c) = chars.next() {
                text.push_str(&ascii(c));
                let last = chars.peek().map_or(true, |n| *n == '\n');
                if long && "/,&|?".contains(c) && !last {
                    text.push_str("\\:");
                }
            }
            text
        });
        out.push_str(&words.collect::<Vec<_>>().join(" "));
    }
    out
}

/// No Markdown leaks onto the page: the help's code spans are bold there,
/// and no backtick is left, in the source or as man shows it.
#[test]
fn man_page_shows_no_backticks() {
    let page = String::from_utf8(man_page()).unwrap();
    let quoted: Vec<&str> = page.lines().filter(|l| l.contains('`')).collect();
    assert!(quoted.is_empty(), "backticks on the page: {quoted:#?}");
    for bold in [
        "Name this drip for \\fBdrip ctl\\fP (1 to 64",
        "Listen on no control socket: \\fBdrip ctl\\fP cannot reach this drip",
        "(not \\fB\\-\\fP: stdout carries the records)",
    ] {
        assert!(page.contains(bold), "{bold:?} not on the page");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drip.1");
    std::fs::write(&path, &page).unwrap();
    // The page as man shows it, where man is here.
    if !common::have(&["man"]) {
        return;
    }
    let out = Command::new("man")
        .args(["-l"])
        .arg(&path)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man");
    assert!(out.status.success(), "man failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("control socket: drip ctl cannot"), "{text}");
    assert!(!text.contains('`'), "man shows a backtick");
}

#[test]
fn man_page_matches_the_cli() {
    check(&completions_dir().join("drip.1"), &man_page());
}

/// `man --warnings` reads the page as a terminal of `width` columns
/// would show it; what troff warns of, if anything.
fn man_warnings(page: &Path, width: usize) -> String {
    let out = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", width.to_string())
        .env("MANPAGER", "cat")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .expect("man");
    assert!(out.status.success(), "man failed: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn man_page_has_no_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("drip.1");
    std::fs::write(&page, man_page()).unwrap();
    // In ASCII: no preprocessor need guess the encoding.
    assert!(std::fs::read(&page).unwrap().is_ascii());
    if !common::have(&["man"]) {
        return;
    }
    for width in [70, 80, 100, 132, 200] {
        let warnings = man_warnings(&page, width);
        assert!(warnings.is_empty(), "at {width} columns:\n{warnings}");
    }
}

#[test]
fn man_page_stands_alone() {
    let text = String::from_utf8(man_page()).unwrap();
    let sections: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix(".SH "))
        .map(|s| s.trim_matches('"'))
        .collect();
    assert_eq!(
        sections,
        [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "ARGUMENTS",
            "PACE",
            "BUCKET",
            "KEYS",
            "SHARE",
            "JOBS",
            "OBSERVE",
            "HELP",
            "DRIP CTL",
            "SIGNALS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "EXAMPLES",
            "SEE ALSO",
            "VERSION"
        ]
    );
    // Value names in the synopsis.
    let synopsis = text.split(".SH SYNOPSIS").nth(1).unwrap();
    let synopsis = synopsis.split(".SH").next().unwrap();
    for part in [
        "[\\fB\\-r\\fR|\\fB\\-\\-rate\\fR \\fIRATE[:BURST]\\fR]",
        "[\\fB\\-o\\fR|\\fB\\-\\-overflow\\fR \\fIPOLICY\\fR]",
        "[\\fB\\-\\-dead\\-letter\\fR \\fIFILE\\fR]",
        "[\\fIFILE\\fR]...",
    ] {
        assert!(synopsis.contains(part), "{part} not in {synopsis}");
    }
    // What the README explains, the page says too.
    for needle in [
        "SIGUSR1",
        "second one",
        "dead letter",
        "max_wait_ms",
        "records_out",
        "NO_COLOR",
        "overflowed under",
        "128 + the signal",
        "pv(1), xargs(1), parallel(1)",
        "drip ctl TARGET pause",
        "SO_PEERCRED",
        "textfile collector",
        "drop\\-oldest",
        "bottom row",
        // --exec whole: the headers directory, the joblog's fields, the
        // signals, the overload pause, the display.
        "drip\\-headers\\-XXXXXX",
        "duration_us (whole microseconds)",
        "then KILL 200 ms later, and leaves",
        "Retry\\-After (seconds or an HTTP date)",
        "starts 3.20/s",
    ] {
        assert!(text.contains(needle), "man page lacks {needle:?}");
    }
}
