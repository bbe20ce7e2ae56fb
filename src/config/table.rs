//! The settings as docs/api.md shows them, rendered from their definitions:
//! each one's variable, its default and its doc comment, so that the page
//! cannot say what the code does not. `hmdp settings` prints the table, and
//! a test holds the page to it.

use clap::{Arg, CommandFactory, Parser};

use super::Config;

/// `RUST_LOG`: not a flag but `tracing`'s filter, which `hmdp` reads as it
/// starts (`main.rs`).
pub const DEFAULT_LOG_FILTER: &str = "info";

const LOG_FILTER_MEANING: &str = "Which log lines are written, in `tracing`'s filter syntax (`warn`, \
     `hmdp=debug,info`). At `info` each request's failures and the service's events, in a span with the request's \
     method, path (never its query) and id; never an SMS code (`LOG_SMS_CODES`) or a whole phone.";

/// Everything `hmdp serve` reads, as clap sees it.
#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    config: Config,
}

/// The table: a row per variable, in the order the groups declare them,
/// then `RUST_LOG`.
pub fn settings_table() -> String {
    let mut table = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for arg in Serve::command().get_arguments() {
        let Some(variable) = arg.get_env() else { continue };
        let meaning = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
        table += &row(&variable.to_string_lossy(), &default_of(arg), &meaning);
    }
    table += &row("RUST_LOG", &format!("`{DEFAULT_LOG_FILTER}`"), LOG_FILTER_MEANING);
    table
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

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "docs/api.md";
    const OPENS: &str =
        "<!-- settings: generated from src/config by `hmdp settings`; edit the doc comments there -->\n";
    const CLOSES: &str = "<!-- end of settings -->";

    /// A setting's meaning is its doc comment: one without is a blank cell.
    #[test]
    fn every_setting_says_what_it_means() {
        for arg in Serve::command().get_arguments() {
            if let Some(variable) = arg.get_env() {
                let help = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
                assert!(help.len() > 10, "{variable:?} has no doc comment to show");
            }
        }
        let table = settings_table();
        assert!(table.contains("| `RUST_LOG` | `info` |"), "{table}");
        assert!(table.contains("| `JWT_SECRET` | (required) |"), "{table}");
        assert!(table.contains("| `MAX_CONNECTIONS` | `16000` |"), "{table}");
        assert!(table.lines().count() > 50, "{table}");
    }

    /// docs/api.md shows the settings as the code defines them. Run with
    /// `UPDATE_DOCS=1` to write the table into the page.
    #[test]
    fn the_settings_table_of_the_docs_is_the_one_the_code_renders() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        let page = std::fs::read_to_string(&path).unwrap();
        let start = page.find(OPENS).expect("the settings block's opening marker") + OPENS.len();
        let end = start + page[start..].find(CLOSES).expect("the settings block's closing marker");
        let rendered = settings_table();
        if page[start..end] == rendered {
            return;
        }
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, format!("{}{rendered}{}", &page[..start], &page[end..])).unwrap();
            return;
        }
        panic!(
            "{PAGE}'s settings differ from the code's; run `UPDATE_DOCS=1 cargo test --lib settings_table` \
             (or put `hmdp settings` there). The code renders:\n{rendered}"
        );
    }
}
