//! CPU time of processes, read from `/proc`: what the benches charge each
//! request to the server, to PostgreSQL (its postmaster, every live
//! backend, and the backends it has reaped) and to the clients.

use std::process::Command;

/// Reads CPU seconds of processes from `/proc/<pid>/stat`.
pub struct Clock {
    ticks_per_second: f64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock in the kernel's ticks (`getconf CLK_TCK`, 100 when unknown).
    pub fn new() -> Clock {
        let out = Command::new("getconf").arg("CLK_TCK").output();
        let ticks = out
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0);
        Clock {
            ticks_per_second: ticks,
        }
    }

    /// (utime + stime, cutime + cstime, ppid) of a process, in ticks.
    fn stat(pid: u32) -> Option<(u64, u64, u32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces; the fields start after its ')'.
        let rest = &text[text.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Some((n(11) + n(12), n(13) + n(14), u32::try_from(n(1)).ok()?))
    }

    fn seconds(&self, ticks: u64) -> f64 {
        // Ticks of one process stay far below 2^52: exact as f64.
        ticks as f64 / self.ticks_per_second
    }

    /// CPU seconds a process has used itself (0 once it is gone).
    pub fn own(&self, pid: u32) -> f64 {
        self.seconds(Self::stat(pid).map_or(0, |s| s.0))
    }

    /// CPU seconds of a PostgreSQL cluster: the postmaster, every live
    /// child, and the children it has reaped.
    pub fn postgres(&self, postmaster: u32) -> f64 {
        let mut ticks = Self::stat(postmaster).map_or(0, |(own, reaped, _)| own + reaped);
        for pid in children(postmaster) {
            ticks += Self::stat(pid).map_or(0, |s| s.0);
        }
        self.seconds(ticks)
    }
}

/// The live children of a process.
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| Clock::stat(*pid).is_some_and(|s| s.2 == parent))
        .collect()
}
