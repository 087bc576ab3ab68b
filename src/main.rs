//! The drip binary: parse, run, map the outcome to an exit status.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use drip::cli::{Cli, Config};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
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
            Some(e) => drip::input::describe(e),
            None => cause.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// Help and version go to stdout with status 0; anything else is a usage
/// error: one line on stderr, status 2.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let text = err.render().to_string();
    let first = text.lines().next().unwrap_or("invalid usage");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let _ = writeln!(io::stderr(), "drip: {first} (see 'drip --help')");
    ExitCode::from(drip::EXIT_USAGE as u8)
}
