//! The configuration reference (`docs/configuration.md`) rendered from the
//! command line's own definitions, so the page cannot drift from the
//! flags: `tests/docs.rs` compares them, and rewrites the page when run
//! with `UPDATE_DOCS=1`.

use super::Cli;
use clap::CommandFactory;

/// What the page says before the tables.
const INTRO: &str = "# Configuration reference

Every option of `placement serve` is a flag with an environment fallback;
Placement's own `placement.conf` (`--config-file`, `--config-dir`, or
Placement's default locations; read as oslo.config reads it, see
[migrating](migrating.md)) sets defaults that flags and environment
variables still override. This page is generated from the code
(`UPDATE_DOCS=1 cargo test --test docs` rewrites it; the test fails when it
is stale).

Logs go to standard error, or to `--log-file` (`[DEFAULT] log_file`),
reopened on SIGHUP; `RUST_LOG` sets the level (default
`info,sqlx=warn`). Placement's `[placement]` options keep their meaning;
note that `max_allocation_candidates` defaults to 1000 here (unlimited in
Placement), so that a wide tree cannot make one request run away. Values
that may hold secrets (database URLs, the Keystone password) are never
shown by `--help`.
";

/// The whole page.
pub fn markdown() -> String {
    let cli = Cli::command();
    let mut out = String::from(INTRO);
    for name in ["serve", "import", "audit"] {
        if let Some(sub) = cli.find_subcommand(name) {
            out.push_str(&format!("\n## placement {name}\n\n"));
            if let Some(about) = sub.get_about() {
                out.push_str(&format!("{}\n\n", one_line(&about.to_string())));
            }
            out.push_str(&table(sub));
        }
    }
    out
}

fn table(cmd: &clap::Command) -> String {
    let mut out = String::from("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.join(",") {
            d if d.is_empty() => String::new(),
            d => format!("`{d}`"),
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| one_line(&h.to_string()))
            .unwrap_or_default();
        out.push_str(&format!("| `--{long}` | {env} | {default} | {help} |\n"));
    }
    out
}

/// A paragraph on one line, safe inside a table cell.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
