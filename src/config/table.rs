//! The settings as docs/api.md shows them, rendered from their definitions:
//! each one's variable, its default and its doc comment, so that the page
//! cannot say what the code does not. `hmdp settings` prints the table, and
//! a test holds the page to it.

use clap::{Arg, Command};

/// `RUST_LOG`: not a flag but `tracing`'s filter, which `hmdp` reads as it
/// starts (`main.rs`).
pub const DEFAULT_LOG_FILTER: &str = "info";

const LOG_FILTER_MEANING: &str = "Which log lines are written, in `tracing`'s filter syntax (`warn`, \
     `hmdp=debug,info`). At `info` each request's failures and the service's events, in a span with the request's \
     method, path (never its query) and id; never an SMS code (`LOG_SMS_CODES`) or a whole phone.";

/// The table: a row per variable of `command`, in the order the groups
/// declare them, then `RUST_LOG`.
pub(super) fn render(command: &Command) -> String {
    let mut table = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for arg in command.get_arguments() {
        let Some(variable) = arg.get_env() else { continue };
        table += &row(&variable.to_string_lossy(), &default_of(arg), &meaning(arg));
    }
    table += &row("RUST_LOG", &format!("`{DEFAULT_LOG_FILTER}`"), LOG_FILTER_MEANING);
    table
}

pub(super) fn meaning(arg: &Arg) -> String {
    arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default()
}

fn row(variable: &str, default: &str, meaning: &str) -> String {
    // One line a row; a pipe would end the cell.
    let meaning = meaning.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
    format!("| `{variable}` | {default} | {meaning} |\n")
}

fn default_of(arg: &Arg) -> String {
    let values: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    match values.as_slice() {
        [] if arg.is_required_set() => "(required)".to_owned(),
        [] => "unset".to_owned(),
        [value] if value.is_empty() => "empty".to_owned(),
        values => format!("`{}`", values.join(",")),
    }
}
