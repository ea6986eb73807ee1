//! The agent's own directory (`--state-dir`): what it keeps across a
//! restart and an outage (the last policy, the evictions the service has
//! not recorded). The agent is root: the directory must be its own and
//! closed to others, and a file is written beside its place and renamed
//! over it, never through a link another user could plant.

use serde::{de::DeserializeOwned, Serialize};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The largest file the agent reads back.
const READ_LIMIT: u64 = 8 * 1024 * 1024;

/// A directory checked to be the agent's.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Makes the directory (mode 0700) when missing, and refuses one that
    /// is a link, is not a directory, belongs to another user, or others
    /// may write.
    pub fn open(dir: &Path) -> Result<StateDir, String> {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let me = rustix::process::geteuid().as_raw();
        if !meta.file_type().is_dir() {
            return Err(format!(
                "{}: not a directory (a link is refused)",
                dir.display()
            ));
        }
        if meta.uid() != me {
            return Err(format!(
                "{}: owned by uid {}, not this agent's ({me})",
                dir.display(),
                meta.uid()
            ));
        }
        if meta.permissions().mode() & 0o022 != 0 {
            return Err(format!(
                "{}: others may write to it; make it 0700",
                dir.display()
            ));
        }
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    /// A kept value (None: never kept, or unreadable, which is logged).
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        let path = self.dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .ok()?;
        let mut text = String::new();
        if let Err(e) =
            std::io::Read::read_to_string(&mut std::io::Read::take(file, READ_LIMIT), &mut text)
        {
            tracing::warn!(target: "placement::agent", path = %path.display(), error = %e, "unreadable; ignored");
            return None;
        }
        match serde_json::from_str(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(target: "placement::agent", path = %path.display(), error = %e,
                    "not what this agent keeps there; ignored");
                None
            }
        }
    }

    /// Keeps a value: written to a new file beside it, synced, then
    /// renamed over the old one (a crash leaves the old or the new). A
    /// failure is logged; the agent goes on from memory.
    pub fn save<T: Serialize + ?Sized>(&self, name: &str, value: &T) {
        if let Err(e) = self.write(name, value) {
            tracing::error!(target: "placement::agent", file = name, error = %e, "state not kept");
        }
    }

    fn write<T: Serialize + ?Sized>(&self, name: &str, value: &T) -> std::io::Result<()> {
        let path = self.dir.join(name);
        let fresh = self.dir.join(format!(".{name}.new"));
        // A leftover of a crash; never a link followed (remove_file
        // removes the link itself).
        let _ = std::fs::remove_file(&fresh);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&fresh)?;
        file.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        std::fs::rename(&fresh, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_values_come_back_and_open_directories_are_refused() {
        let base = std::env::temp_dir().join(format!("agent-state-{}", std::process::id()));
        let state = StateDir::open(&base.join("state")).unwrap();
        state.save("x.json", &vec![1, 2, 3]);
        assert_eq!(state.load::<Vec<i32>>("x.json"), Some(vec![1, 2, 3]));
        assert_eq!(state.load::<Vec<i32>>("none.json"), None);
        let open = base.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(StateDir::open(&open)
            .unwrap_err()
            .contains("others may write"));
        std::os::unix::fs::symlink(&open, base.join("link")).unwrap();
        assert!(StateDir::open(&base.join("link"))
            .unwrap_err()
            .contains("not a directory"));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
