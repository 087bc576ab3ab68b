//! The drip binary: parse, run, map the outcome to an exit status.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use drip::{Cli, Command, Config};

fn main() -> ExitCode {
    // Started again by a drip running jobs, to end them when it is gone.
    if let Some(status) = drip::serve_as_warden_if_asked() {
        return ExitCode::from(status);
    }
    // `help` as the first word is the help, as `ctl` is a subcommand: a
    // file named help here is read as ./help, which is said.
    if std::env::args_os().nth(1).is_some_and(|w| w == "help")
        && std::path::Path::new("help").exists()
    {
        let _ = writeln!(
            io::stderr(),
            "drip: help: printing the help; to read the file named help, give it as ./help"
        );
    }
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    if cli.summary {
        return help_out("-h", || write!(io::stdout(), "{}", drip::SUMMARY));
    }
    match cli.command.take() {
        Some(Command::Ctl(ctl)) => {
            let args: Vec<String> = ctl.target.into_iter().chain(ctl.command).collect();
            let status = drip::ctl(&args, &mut io::stdout(), &mut io::stderr());
            return ExitCode::from(status as u8);
        }
        Some(Command::Take(take)) => {
            let status = drip::take(take, &mut io::stderr());
            return ExitCode::from(status as u8);
        }
        None => {}
    }
    let config = match Config::try_from(cli) {
        Ok(config) => config,
        Err(err) => return usage_error(&err),
    };
    match drip::run_stdout(config) {
        Ok(ending) => ExitCode::from(ending.status() as u8),
        Err(err) => {
            let _ = writeln!(io::stderr(), "drip: {}", message(&err));
            ExitCode::from(drip::exit_status(&err) as u8)
        }
    }
}

/// `context: cause` on one line, with std's "(os error N)" left out.
fn message(err: &anyhow::Error) -> String {
    err.chain()
        .map(|cause| match cause.downcast_ref::<io::Error>() {
            Some(e) => drip::describe(e),
            None => cause.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// Write help (`what`: `-h`, `--help`, `--version`) to stdout with `print`:
/// status 0, or 1 with a message when it cannot be written (a reader that
/// went away, as with `| head`, is no error).
fn help_out(what: &str, print: impl FnOnce() -> io::Result<()>) -> ExitCode {
    match print().and_then(|()| io::stdout().flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let why = drip::describe(&e);
            let _ = writeln!(io::stderr(), "drip: {what}: writing to stdout: {why}");
            ExitCode::from(drip::EXIT_ERROR as u8)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Help and version go to stdout with status 0 (1, with a message, when
/// they cannot be written; a reader that went away, as with `| head`, is
/// no error); anything else is a usage error, status 2: one line on
/// stderr, or a subcommand's help when it was given no words (`drip ctl`).
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let what = match err.kind() {
        ErrorKind::DisplayHelp => Some("--help"),
        ErrorKind::DisplayVersion => Some("--version"),
        _ => None,
    };
    if let Some(what) = what {
        return help_out(what, || err.print());
    }
    if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // `drip ctl` alone: its usage, on stderr, as a usage error.
        let _ = write!(io::stderr(), "{}", err.render());
        return ExitCode::from(drip::EXIT_USAGE as u8);
    }
    let text = err.render().to_string();
    let first = text.lines().next().unwrap_or("invalid usage");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // clap's tips (a similar flag for a misspelled one), on the same line.
    let tips: String = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("tip: "))
        .map(|tip| format!("tip: {tip}; "))
        .collect();
    let _ = writeln!(io::stderr(), "drip: {first} ({tips}see 'drip --help')");
    ExitCode::from(drip::EXIT_USAGE as u8)
}
