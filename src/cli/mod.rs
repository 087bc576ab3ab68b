//! The command line: the flags ([`Cli`], each value's parser living with
//! the type it parses), the checks that make the [`Config`] of them, and
//! the manual's text.

mod args;
mod check;
mod config;
mod manual;

pub use args::{Cli, Command, CtlArgs, TakeArgs};
pub use check::{take_request, RateTable};
pub use config::Config;
pub use manual::{
    Paragraph, CONTROL, DESCRIPTION, ENVIRONMENT, EXAMPLES, EXIT_PRECEDENCE, EXIT_STATUSES, FILES,
    SEE_ALSO, SIGNALS, SUMMARY,
};

pub use crate::input::Input;
