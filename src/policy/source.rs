//! The policy in force and the file it comes from. oslo.policy reads a
//! changed policy file again at the next enforcement; here the file is
//! looked at every few seconds (and on SIGHUP) and the rules are built
//! again when its text changed. A text that does not build leaves the
//! rules in force as they were, and says why in the log; a file that
//! disappears means the defaults, as at start-up.

use super::{Mode, Policy};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// The rules in force, rebuilt from their file when it changes.
#[derive(Debug)]
pub struct PolicySource {
    mode: Mode,
    path: Option<PathBuf>,
    current: RwLock<Arc<Policy>>,
    /// The text the rules in force were built from (None: no file).
    text: Mutex<Option<String>>,
}

/// What a look at the file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// Same text (or no file configured).
    Unchanged,
    /// The rules were built again from the new text.
    Reloaded,
    /// The new text does not build; the rules in force stay.
    Refused(String),
}

/// The file's text: None when it does not exist (the defaults then).
fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("policy file {}: {e}", path.display())),
    }
}

fn build(mode: Mode, path: &Path, text: Option<&str>) -> Result<Policy, String> {
    let shown = path.display().to_string();
    Policy::build(mode, text.map(|t| (shown.as_str(), t))).map_err(|e| e.to_string())
}

impl PolicySource {
    /// The rules of `path` (the defaults when it does not exist, as in
    /// oslo.policy, with a warning) or the defaults alone.
    pub fn load(mode: Mode, path: Option<&Path>) -> Result<PolicySource, String> {
        let (policy, text) = match path {
            None => (Policy::build(mode, None).map_err(|e| e.to_string())?, None),
            Some(p) => {
                let text = read(p)?;
                if text.is_none() {
                    tracing::warn!(
                        "policy file {} does not exist: the default rules apply",
                        p.display()
                    );
                }
                (build(mode, p, text.as_deref())?, text)
            }
        };
        for w in &policy.warnings {
            tracing::warn!("{w}");
        }
        Ok(PolicySource {
            mode,
            path: path.map(Path::to_path_buf),
            current: RwLock::new(Arc::new(policy)),
            text: Mutex::new(text),
        })
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Policy> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The configured file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Looks at the file; builds the rules again when its text changed.
    pub fn refresh(&self) -> Refresh {
        let Some(path) = &self.path else {
            return Refresh::Unchanged;
        };
        let text = match read(path) {
            Ok(t) => t,
            Err(e) => return Refresh::Refused(e),
        };
        let mut held = self.text.lock().unwrap_or_else(|p| p.into_inner());
        if *held == text {
            return Refresh::Unchanged;
        }
        match build(self.mode, path, text.as_deref()) {
            Ok(policy) => {
                for w in &policy.warnings {
                    tracing::warn!("{w}");
                }
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
                *held = text;
                Refresh::Reloaded
            }
            // Not remembered as seen: the next look says it again until
            // the file is fixed.
            Err(e) => Refresh::Refused(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Credentials, Decision, Target};

    #[test]
    fn a_changed_file_is_built_again_and_a_broken_one_leaves_the_rules() {
        let dir = std::env::temp_dir().join(format!("policy-source-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.yaml");
        std::fs::write(&path, "\"placement:usages\": \"role:operator\"\n").unwrap();
        let mode = Mode {
            enforce_new_defaults: true,
            enforce_scope: true,
        };
        let source = PolicySource::load(mode, Some(&path)).unwrap();
        let operator = Credentials {
            user_id: "u".into(),
            project_id: Some("p".into()),
            roles: vec!["operator".into()],
            ..Credentials::default()
        };
        let t = Target::new();
        let allowed = |s: &PolicySource| {
            s.current().enforce("placement:usages", &operator, &t) == Decision::Allowed
        };
        assert!(allowed(&source));
        assert_eq!(source.refresh(), Refresh::Unchanged);
        std::fs::write(&path, "\"placement:usages\": \"role:auditor\"\n").unwrap();
        assert_eq!(source.refresh(), Refresh::Reloaded);
        assert!(!allowed(&source));
        std::fs::write(&path, "\"placement:usages\": \"role:operator or (\"\n").unwrap();
        assert!(matches!(source.refresh(), Refresh::Refused(e) if e.contains("line 1")));
        assert!(!allowed(&source), "the rules in force stay");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(source.refresh(), Refresh::Reloaded, "no file: the defaults");
        assert!(!allowed(&source));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
