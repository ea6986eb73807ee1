//! The documentation stays true: the configuration reference is the
//! command line's own (rewritten with `UPDATE_DOCS=1`), and every relative
//! link of the README and `docs/` points to a file and heading that exist.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_configuration_reference_is_the_command_lines() {
    let path = root().join("docs/configuration.md");
    let rendered = placement::config::reference::markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &rendered).expect("write docs/configuration.md");
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/configuration.md is stale: run UPDATE_DOCS=1 cargo test --test docs"
    );
    for flag in [
        "--bind",
        "--auth-strategy",
        "--admission-round-retention",
        "--keystone-invalid-token-cache-seconds",
    ] {
        assert!(rendered.contains(&format!("`{flag}`")), "{flag}");
    }
}

/// GitHub's anchor of a heading: lower case, spaces to dashes, other
/// punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// Every `](target)` of a markdown text that is not a URL.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let mut pages = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "md") {
            pages.push(e.path());
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        let dir = page.parent().unwrap_or(Path::new("."));
        for link in relative_links(&text) {
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            let is_markdown = target.extension().is_some_and(|x| x == "md");
            if !fragment.is_empty() && is_markdown {
                let heads = anchors(&std::fs::read_to_string(&target).unwrap_or_default());
                if !heads.iter().any(|h| h == fragment) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(pages.len() >= 10, "{} pages", pages.len());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
