//! The cgroup filesystem's files, read and written safely: errors that
//! name the file, counters kept open and read again from their start,
//! bounded reads that never follow a final link, and writes that land only
//! on a cgroup filesystem (the agent is root: no link or bind mount another
//! user could plant turns a write into one elsewhere).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `CGROUP_SUPER_MAGIC` and `CGROUP2_SUPER_MAGIC` (linux/magic.h).
const CGROUP_MAGICS: [i64; 2] = [0x0027_e0eb, 0x6367_7270];
/// The largest file the agent reads from a cgroup (memory.stat is ~1 KB).
const READ_LIMIT: u64 = 64 * 1024;

/// What is wrong with a cgroup or one of its files.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{0}")]
    Setup(String),
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}: not on a cgroup filesystem; not written")]
    NotCgroup(PathBuf),
    #[error("{path}: cannot read {text:?} as a number")]
    Unreadable { path: PathBuf, text: String },
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |error| CgroupError::Io {
        path: path.to_path_buf(),
        error,
    }
}
/// A consumer's counter files, kept open: each look reads them again from
/// their start, without walking their paths again (which was most of the
/// agent's own CPU with a hundred consumers).
pub struct OpenCounters {
    cpu: File,
    usage: File,
    stat: File,
    /// cpu.stat's key of microseconds (v2); None: one number of ns (v1).
    cpu_key: Option<&'static str>,
    inactive_key: &'static str,
    /// The memory directory, for errors.
    dir: PathBuf,
    buf: Vec<u8>,
}

/// Bytes read of one counter file (v1's memory.stat is ~1.5 KB).
const READ_BUFFER: usize = 8 * 1024;

impl OpenCounters {
    /// Opens a consumer's CPU counter (`cpu_key`: cpu.stat's key of
    /// microseconds on v2; None: v1's one number of ns), its memory usage
    /// and its memory.stat (`inactive_key`: the inactive file pages' key);
    /// `dir` names it in errors.
    pub fn open(
        cpu: &Path,
        cpu_key: Option<&'static str>,
        usage: &Path,
        inactive_key: &'static str,
        dir: &Path,
    ) -> Result<OpenCounters, CgroupError> {
        Ok(OpenCounters {
            cpu: open_read(cpu)?,
            usage: open_read(usage)?,
            stat: open_read(&dir.join("memory.stat"))?,
            cpu_key,
            inactive_key,
            dir: dir.to_path_buf(),
            buf: vec![0; READ_BUFFER],
        })
    }

    /// CPU time the consumer used since it started, in nanoseconds.
    pub fn cpu_ns(&mut self) -> Result<u64, CgroupError> {
        let text = read_from_start(&self.cpu, &mut self.buf, &self.dir)?;
        let value = match self.cpu_key {
            None => text.trim().parse::<u64>().ok(),
            Some(key) => key_in(text, key).map(|us| us.saturating_mul(1000)),
        };
        value.ok_or_else(|| unreadable(&self.dir, "its CPU counter"))
    }

    /// Its memory working set in bytes (usage less the inactive file
    /// cache the kernel reclaims first, as the kubelet counts it).
    pub fn memory_bytes(&mut self) -> Result<u64, CgroupError> {
        let usage = read_from_start(&self.usage, &mut self.buf, &self.dir)?
            .trim()
            .parse::<u64>()
            .map_err(|_| unreadable(&self.dir, "its memory usage"))?;
        let stat = read_from_start(&self.stat, &mut self.buf, &self.dir)?;
        Ok(usage.saturating_sub(key_in(stat, self.inactive_key).unwrap_or(0)))
    }
}

fn unreadable(dir: &Path, what: &str) -> CgroupError {
    CgroupError::Unreadable {
        path: dir.to_path_buf(),
        text: what.to_string(),
    }
}

fn open_read(path: &Path) -> Result<File, CgroupError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io(path))
}

/// A kept-open cgroup file's text, read again from offset 0 (the kernel
/// writes it anew for each read from the start).
fn read_from_start<'b>(file: &File, buf: &'b mut [u8], dir: &Path) -> Result<&'b str, CgroupError> {
    use std::os::unix::fs::FileExt;
    let n = file.read_at(buf, 0).map_err(io(dir))?;
    std::str::from_utf8(&buf[..n]).map_err(|_| unreadable(dir, "text"))
}

/// A `key value` line's value.
pub(super) fn key_in(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// A cgroup file's text (bounded; a final link is not followed).
pub fn read_text(path: &Path) -> Result<String, CgroupError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io(path))?;
    let mut text = String::new();
    file.take(READ_LIMIT)
        .read_to_string(&mut text)
        .map_err(io(path))?;
    Ok(text)
}

/// A file holding one number.
pub(super) fn read_number(path: &Path) -> Result<u64, CgroupError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|_| CgroupError::Unreadable {
        path: path.to_path_buf(),
        text: text.trim().chars().take(40).collect(),
    })
}

/// Writes a cgroup file: never through a final link, and only when the
/// open file is on a cgroup filesystem.
pub fn write_cgroup(path: &Path, value: &str) -> Result<(), CgroupError> {
    let mut file: File = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io(path))?;
    let fs = rustix::fs::fstatfs(&file).map_err(|e| CgroupError::Io {
        path: path.to_path_buf(),
        error: e.into(),
    })?;
    // The field's width differs per architecture (i64 on x86_64).
    #[allow(clippy::useless_conversion)]
    let magic = i64::try_from(fs.f_type).unwrap_or(-1);
    if !CGROUP_MAGICS.contains(&magic) {
        return Err(CgroupError::NotCgroup(path.to_path_buf()));
    }
    file.write_all(value.as_bytes()).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_never_written() {
        let dir = std::env::temp_dir().join(format!("cgroup-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cpu.cfs_quota_us");
        std::fs::write(&file, "-1").unwrap();
        let err = write_cgroup(&file, "1000").unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "-1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
