//! The layering rule of `src/lib.rs`, checked on the source: every
//! `crate::area` reference (and `super::x` inside `api/`) must point to a
//! lower layer, so there is no import cycle between areas, and no handler
//! in `src/api/` imports another handler.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Areas by layer; an area may use only areas of a lower layer.
const LAYERS: &[(&str, u8)] = &[
    ("types", 0),
    ("error", 0),
    ("config", 0),
    ("policy", 0),
    ("metrics", 0),
    ("coalescing", 0),
    ("clock", 0),
    ("microversions", 0),
    ("log_output", 0),
    ("db", 1),
    ("sched", 1),
    ("auth", 1),
    ("candidates", 2),
    ("deploy", 3),
    ("allocation", 2),
    ("inventory", 2),
    ("provider", 2),
    ("colocation", 2),
    ("import", 2),
    ("audit", 2),
    ("upgrade", 2),
    ("fairness", 3),
    // The per-machine agent: a client of the service over HTTP, which may
    // use the pure rules below it (colocation's watermarks), never `db`.
    ("agent", 3),
    ("state", 4),
    ("maintenance", 4),
    ("api", 5),
    // lib.rs's `app()`: the api's router, mounted under the path prefix.
    ("app", 5),
    ("serve", 6),
    ("localdb", 6),
    ("startup", 7),
];

/// Modules of `src/api/` that are plumbing, not handlers: any handler may use them.
const API_PLUMBING: &[&str] = &[
    "mod",
    "extract",
    "microversion",
    "middleware",
    "respond",
    "schema",
    "docs",
    "routes",
    "policy",
];

fn layer(area: &str) -> Option<u8> {
    LAYERS.iter().find(|(a, _)| *a == area).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every Rust file under `src/`, with its path from there (`/`-separated).
fn source_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (p, rel)
        })
        .collect()
}

/// The file's text without its `#[cfg(test)]` module (tests may reach anywhere).
fn non_test_text(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    match text.find("#[cfg(test)]") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Identifiers following `prefix` in `text` (`crate::db::x` → `db`).
fn after(text: &str, prefix: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// Names inside `use crate::{a, b::c}` groups.
fn grouped(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("use crate::{") {
        let rest = &text[i + "use crate::{".len()..];
        let group = &rest[..rest.find("};").unwrap_or(0)];
        for part in group.split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn areas_only_use_lower_layers_and_handlers_use_no_handlers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let area = parts[0].as_str();
        if matches!(area, "lib" | "main") {
            continue;
        }
        let text = non_test_text(f);
        let mut used = after(&text, "crate::");
        used.extend(grouped(&text));
        for other in &used {
            if other == area || other == "self" {
                continue;
            }
            match (layer(area), layer(other)) {
                (Some(mine), Some(theirs)) if theirs < mine => {}
                (None, _) => {
                    problems.push(format!("{}: area '{area}' has no layer", rel.display()))
                }
                _ => problems.push(format!("{} uses crate::{other}", rel.display())),
            }
        }
        let is_handler =
            area == "api" && parts.len() == 2 && !API_PLUMBING.contains(&parts[1].as_str());
        if is_handler {
            let mut near = after(&text, "super::");
            near.extend(after(&text, "crate::api::"));
            for m in near {
                if m != parts[1] && !API_PLUMBING.contains(&m.as_str()) {
                    problems.push(format!("handler api/{} imports handler api/{m}", parts[1]));
                }
            }
        }
    }
    assert!(problems.is_empty(), "layering:\n{}", problems.join("\n"));
}

/// Services, the engine and the data layer know nothing of HTTP: no
/// `ApiError`, `StatusCode` or `axum` outside `src/api/`, `src/serve.rs`
/// and `src/main.rs`; their errors are `crate::error::Error`, mapped once
/// in `api::respond::error`.
#[test]
fn only_the_http_layer_knows_http() {
    let mut problems = Vec::new();
    for (p, rel) in &source_files() {
        if rel.starts_with("api/") || rel == "serve.rs" || rel == "main.rs" {
            continue;
        }
        let text = non_test_text(p);
        for word in ["ApiError", "ApiResult", "StatusCode", "axum"] {
            if text.contains(word) {
                problems.push(format!("src/{rel} mentions {word}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "HTTP outside the HTTP layer:\n{}",
        problems.join("\n")
    );
}

/// The module of `src/<area>/` a reference names (`super::load` from
/// `fairness/admission.rs`, `crate::api::respond::x`), if any.
fn sibling_refs(text: &str, area: &str) -> BTreeSet<String> {
    let mut out = after(text, "super::");
    out.extend(after(text, &format!("crate::{area}::")));
    out
}

/// Module cycles inside one area (`api`, `fairness`): no module reaches
/// itself through the others.
fn cycles_in(area: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(area);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    // A module's `tests.rs` is its test module: tests may reach anywhere.
    files.retain(|p| p.file_name().is_none_or(|n| n != "tests.rs"));
    let module_of = |p: &Path| -> String {
        let rel = p.strip_prefix(&dir).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .to_string();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| module_of(p)).collect();
    let mut edges: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for p in &files {
        let me = module_of(p);
        // In `X/mod.rs` `super::` is the area; deeper, it is inside X.
        let depth = p.strip_prefix(&dir).map_or(0, |r| r.components().count());
        let is_mod_rs = p.file_name().is_some_and(|n| n == "mod.rs");
        let nested = depth > 2 || (depth == 2 && !is_mod_rs);
        let text = non_test_text(p);
        let refs = if nested {
            after(&text, &format!("crate::{area}::"))
        } else {
            sibling_refs(&text, area)
        };
        for r in refs {
            if r != me && r != "mod" && modules.contains(&r) {
                edges.entry(me.clone()).or_default().insert(r);
            }
        }
    }
    let mut found = Vec::new();
    for start in &modules {
        // Depth-first from `start`, looking for a way back to it.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    found.push(format!("{area}: {} -> {start}", path.join(" -> ")));
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_cycles_inside_api_or_fairness() {
    let mut found = cycles_in("api");
    found.extend(cycles_in("fairness"));
    found.extend(cycles_in("candidates"));
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

/// The candidate engine's core and its speed machinery (its wing): the
/// core (`src/candidates/` outside `speed/`) names nothing of the wing and
/// reaches it only through the seams it defines (`candidates::engine`);
/// outside the engine only `state.rs`, which assembles a process's
/// machinery, names the wing: fairness rounds, deployments and handlers
/// hold the seams' handles, never the cache or the shared reads.
#[test]
fn the_engine_core_names_nothing_of_its_wing() {
    let mut problems = Vec::new();
    for (p, rel) in &source_files() {
        if rel.starts_with("candidates/speed/") || rel == "state.rs" {
            continue;
        }
        // Code only: a comment may say where the machinery is.
        let text: String = non_test_text(p)
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        // `candidates/mod.rs` declares the wing; nothing else in the core
        // may refer to it, by any path.
        let text = match rel.as_str() {
            "candidates/mod.rs" => text.replace("pub mod speed;", ""),
            _ => text,
        };
        let core = rel.starts_with("candidates/");
        let names_wing = match core {
            true => text.contains("speed::") || text.contains("mod speed"),
            false => text.contains("candidates::speed"),
        };
        if names_wing {
            let what = if core {
                "the engine's core"
            } else {
                "outside the engine"
            };
            problems.push(format!("src/{rel} ({what}) names candidates::speed"));
        }
    }
    assert!(
        problems.is_empty(),
        "core and wing:\n{}",
        problems.join("\n")
    );
}

/// No positional tuple crosses a module boundary under an alias: rows and
/// records that leave their module are named structs.
#[test]
fn no_public_tuple_aliases() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let found: Vec<String> = files
        .iter()
        .flat_map(|p| {
            let text = non_test_text(p);
            text.lines()
                .filter(|l| l.trim_start().starts_with("pub type ") && l.contains("= ("))
                .map(|l| format!("{}: {}", p.display(), l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "public tuple aliases:\n{}",
        found.join("\n")
    );
}
