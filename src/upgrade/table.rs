//! oslo.upgradecheck's output: the one-column table prettytable draws,
//! details wrapped as Python's `textwrap.wrap(details, 60,
//! subsequent_indent='  ')` wraps them, and placement-status's exit code.

use super::checks::{Check, Outcome};

/// The width oslo.upgradecheck wraps details to.
const DETAILS_WIDTH: usize = 60;

/// oslo.upgradecheck's table.
pub fn render(checks: &[Check]) -> String {
    let lines: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            let mut cell = vec![
                format!("Check: {}", c.name),
                format!(
                    "Result: {}",
                    match c.outcome {
                        Outcome::Success => "Success",
                        Outcome::Warning => "Warning",
                        Outcome::Failure => "Failure",
                    }
                ),
            ];
            let details = c
                .details
                .as_deref()
                .map_or_else(|| "None".to_string(), |d| wrap(d).join("\n"));
            cell.extend(format!("Details: {details}").lines().map(str::to_string));
            cell
        })
        .collect();
    let title = "Upgrade Check Results";
    let width = lines
        .iter()
        .flatten()
        .map(|l| l.chars().count())
        .chain([title.len()])
        .max()
        .unwrap_or(0);
    let rule = format!("+{}+", "-".repeat(width + 2));
    let row = |text: &str| format!("| {text}{} |", " ".repeat(width - text.chars().count()));
    let mut out = vec![rule.clone(), row(title), rule.clone()];
    for check in &lines {
        out.extend(check.iter().map(|l| row(l)));
        out.push(rule.clone());
    }
    out.join("\n")
}

/// placement-status's exit code: 0 all succeeded, 1 a warning, 2 a failure.
pub fn exit_code(checks: &[Check]) -> u8 {
    match checks.iter().map(|c| c.outcome).max() {
        Some(Outcome::Failure) => 2,
        Some(Outcome::Warning) => 1,
        _ => 0,
    }
}

/// The pieces `textwrap` breaks a text into: runs of spaces, and words,
/// a word also ending after a hyphen between two letters and a letter
/// (`placement-` `manage`).
fn chunks(text: &str) -> Vec<String> {
    let chars: Vec<char> = text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let letter = |i: usize| chars.get(i).is_some_and(|c| c.is_alphabetic());
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..chars.len() {
        let space = chars[i] == ' ';
        let next_space = chars.get(i + 1).map(|c| *c == ' ');
        let ends = match next_space {
            None => true,
            Some(next) => next != space,
        };
        let hyphen_break = !space
            && chars[i] == '-'
            && i >= 2
            && letter(i - 1)
            && letter(i - 2)
            && letter(i + 1)
            && (letter(i + 2) || (chars.get(i + 2) == Some(&'-') && letter(i + 3)));
        if ends || hyphen_break {
            out.push(chars[start..=i].iter().collect());
            start = i + 1;
        }
    }
    out
}

/// `textwrap.wrap(text, 60, subsequent_indent='  ')`: greedy lines,
/// spaces dropped at line ends, a word longer than a line broken at its
/// last hyphen that fits, else where the line ends.
pub fn wrap(text: &str) -> Vec<String> {
    let mut rest: Vec<String> = chunks(text);
    rest.reverse();
    let mut lines: Vec<String> = Vec::new();
    while !rest.is_empty() {
        let indent = if lines.is_empty() { "" } else { "  " };
        let width = DETAILS_WIDTH - indent.len();
        if !lines.is_empty() && rest.last().is_some_and(|c| c.trim().is_empty()) {
            rest.pop();
        }
        let mut line: Vec<String> = Vec::new();
        let mut len = 0;
        while let Some(chunk) = rest.last() {
            let n = chunk.chars().count();
            if len + n > width {
                break;
            }
            len += n;
            line.extend(rest.pop());
        }
        if let Some(chunk) = rest.last_mut() {
            if chunk.chars().count() > width {
                let room = width.saturating_sub(len).max(1);
                let chars: Vec<char> = chunk.chars().collect();
                let end = chars[..room]
                    .iter()
                    .rposition(|c| *c == '-')
                    .filter(|&h| h > 0 && chars[..h].iter().any(|c| *c != '-'))
                    .map_or(room, |h| h + 1);
                line.push(chars[..end].iter().collect());
                *chunk = chars[end..].iter().collect();
            }
        }
        if line.last().is_some_and(|c| c.trim().is_empty()) {
            line.pop();
        }
        if !line.is_empty() {
            lines.push(format!("{indent}{}", line.concat()));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Python 3.11's textwrap gives for placement-status's texts.
    #[test]
    fn details_wrap_as_textwrap_wraps_them() {
        assert_eq!(
            wrap("There is at least one resource provider table record which misses its root provider id. Run the \"placement-manage db online_data_migrations\" command."),
            [
                "There is at least one resource provider table record which",
                "  misses its root provider id. Run the \"placement-manage db",
                "  online_data_migrations\" command."
            ]
        );
        assert_eq!(
            wrap("There are 1 incomplete consumers table records for existing allocations. Run the \"placement-manage db online_data_migrations\" command."),
            [
                "There are 1 incomplete consumers table records for existing",
                "  allocations. Run the \"placement-manage db",
                "  online_data_migrations\" command."
            ]
        );
        assert_eq!(
            wrap("Your policy file is JSON-formatted which is deprecated. You need to switch to YAML-formatted file. Use the ``oslopolicy-convert-json-to-yaml`` tool to convert the existing JSON-formatted files to YAML in a backwards-compatible manner: https://docs.openstack.org/oslo.policy/latest/cli/oslopolicy-convert-json-to-yaml.html."),
            [
                "Your policy file is JSON-formatted which is deprecated. You",
                "  need to switch to YAML-formatted file. Use the",
                "  ``oslopolicy-convert-json-to-yaml`` tool to convert the",
                "  existing JSON-formatted files to YAML in a backwards-",
                "  compatible manner: https://docs.openstack.org/oslo.policy/",
                "  latest/cli/oslopolicy-convert-json-to-yaml.html."
            ]
        );
    }

    #[test]
    fn the_table_and_the_exit_code_are_oslo_upgradechecks() {
        let checks = [
            Check {
                name: "Missing Root Provider IDs",
                outcome: Outcome::Success,
                details: None,
            },
            Check {
                name: "Incomplete Consumers",
                outcome: Outcome::Warning,
                details: Some("There are 1 incomplete consumers table records for existing allocations. Run the \"placement-manage db online_data_migrations\" command.".into()),
            },
        ];
        let table = render(&checks);
        let expected = "\
+----------------------------------------------------------------------+
| Upgrade Check Results                                                |
+----------------------------------------------------------------------+
| Check: Missing Root Provider IDs                                     |
| Result: Success                                                      |
| Details: None                                                        |
+----------------------------------------------------------------------+
| Check: Incomplete Consumers                                          |
| Result: Warning                                                      |
| Details: There are 1 incomplete consumers table records for existing |
|   allocations. Run the \"placement-manage db                          |
|   online_data_migrations\" command.                                   |
+----------------------------------------------------------------------+";
        assert_eq!(table, expected);
        assert_eq!(exit_code(&checks), 1);
        assert_eq!(exit_code(&checks[..1]), 0);
    }
}
