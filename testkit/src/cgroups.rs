//! Real cgroups and real processes for the node agent's tests and bench:
//! a parent of the test's own under every cgroup v1 controller (removed
//! with everything in it when dropped), consumers' cgroups in the agent's
//! convention, Python workers that burn CPU or hold memory inside them,
//! and the agent itself as a process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The v1 controllers the agent uses.
pub const CONTROLLERS: [&str; 4] = ["memory", "cpuacct", "cpu", "cpuset"];
const ROOT: &str = "/sys/fs/cgroup";
/// The parent every test's own parent sits under.
const TESTS_PARENT: &str = "placement-agent-tests";

/// Why this machine cannot run the cgroup tests (None: it can).
pub fn unavailable() -> Option<String> {
    if effective_uid() != 0 {
        return Some("not root".into());
    }
    for c in CONTROLLERS {
        let dir = Path::new(ROOT).join(c);
        if !dir.join("cgroup.procs").exists() {
            return Some(format!("no cgroup v1 {c} controller at {}", dir.display()));
        }
        let probe = dir.join(format!("{TESTS_PARENT}-probe-{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&probe) {
            return Some(format!("{}: cannot make a cgroup: {e}", dir.display()));
        }
        let _ = std::fs::remove_dir(&probe);
    }
    if Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map_or(true, |s| !s.success())
    {
        return Some("no python3 for the workers".into());
    }
    None
}

/// Whether a cgroup test runs here. `PLACEMENT_CGROUP_TESTS`:
/// `elsewhere` (the test command's main run: its own suite runs them
/// after), `require` (a machine that cannot is a failure), unset (they run
/// where the machine allows, and say NOT RUN and why where it does not).
pub fn check_or_say(test: &str) -> bool {
    let mode = std::env::var("PLACEMENT_CGROUP_TESTS").unwrap_or_default();
    if mode == "elsewhere" {
        eprintln!("{test}: left to the test command's cgroup suite");
        return false;
    }
    match unavailable() {
        None => true,
        Some(why) if mode == "require" => {
            panic!("{test}: the cgroup tests are required here but cannot run: {why}")
        }
        Some(why) => {
            eprintln!("{test}: NOT RUN: {why}");
            false
        }
    }
}

fn effective_uid() -> u32 {
    // /proc/self/status's Uid line: real, effective, saved, fs.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).and_then(|u| u.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

/// A test's own parent cgroup, in every controller.
pub struct TestCgroups {
    /// Relative to each controller: what `--cgroup-parent` gets.
    pub parent: PathBuf,
    workers: Vec<Child>,
}

impl TestCgroups {
    /// `placement-agent-tests/<name>-<pid>` in every controller (the
    /// cpuset levels get their parent's CPUs and memory nodes).
    pub fn new(name: &str) -> TestCgroups {
        let parent = Path::new(TESTS_PARENT).join(format!("{name}-{}", std::process::id()));
        for c in CONTROLLERS {
            let base = Path::new(ROOT).join(c);
            for level in [Path::new(TESTS_PARENT), parent.as_path()] {
                let dir = base.join(level);
                std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                if c == "cpuset" {
                    inherit_cpuset(&dir);
                }
            }
        }
        TestCgroups {
            parent,
            workers: Vec::new(),
        }
    }

    /// The parent's directory in `controller`.
    pub fn dir(&self, controller: &str) -> PathBuf {
        Path::new(ROOT).join(controller).join(&self.parent)
    }

    /// Limits the parent's memory (the scope the kernel would OOM-kill in).
    pub fn limit_memory_mb(&self, mb: u64) {
        write(
            &self.dir("memory").join("memory.limit_in_bytes"),
            &(mb << 20).to_string(),
        );
    }

    /// The parent's memory working set in MB, as the kernel counts it.
    pub fn working_set_mb(&self) -> u64 {
        working_set_mb(&self.dir("memory"))
    }

    /// A consumer's cgroup (`tier` is `prod`, `mid` or `be`) in every
    /// controller, with a Python worker running `script` inside it.
    pub fn worker(&mut self, tier: &str, consumer: &str, script: &str) -> usize {
        self.spawn_in(tier, consumer, &["python3", "-u", "-c", script])
    }

    /// A consumer's cgroup with `program` (and its arguments) inside it.
    pub fn spawn_in(&mut self, tier: &str, consumer: &str, program: &[&str]) -> usize {
        let mut joins = String::new();
        for c in CONTROLLERS {
            let dir = self.dir(c).join(tier).join(consumer);
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            if c == "cpuset" {
                inherit_cpuset(dir.parent().unwrap());
                inherit_cpuset(&dir);
            }
            joins.push_str(&format!("echo $$ > {}/cgroup.procs && ", dir.display()));
        }
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{joins}exec \"$@\""))
            .arg("worker")
            .args(program)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a worker");
        self.workers.push(child);
        self.workers.len() - 1
    }

    /// A worker's process.
    pub fn child(&mut self, i: usize) -> &mut Child {
        &mut self.workers[i]
    }

    /// Waits for a worker's first line (it started its work).
    pub fn wait_ready(&mut self, i: usize) {
        let out = self.workers[i].stdout.take().expect("its output");
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).expect("a line");
        assert!(line.starts_with("ready"), "worker said {line:?}");
    }

    /// CPU time a consumer's cgroup used, in ns.
    pub fn cpu_ns(&self, tier: &str, consumer: &str) -> u64 {
        let path = self
            .dir("cpuacct")
            .join(tier)
            .join(consumer)
            .join("cpuacct.usage");
        read(&path).trim().parse().unwrap_or(0)
    }

    /// Milli-CPU a consumer uses over `over`.
    pub fn cpu_milli(&self, tier: &str, consumer: &str, over: Duration) -> u64 {
        let before = self.cpu_ns(tier, consumer);
        let t = Instant::now();
        std::thread::sleep(over);
        let used = self.cpu_ns(tier, consumer).saturating_sub(before);
        u64::try_from(u128::from(used) * 1000 / t.elapsed().as_nanos().max(1)).unwrap_or(u64::MAX)
    }
}

impl Drop for TestCgroups {
    /// Kills every worker and removes the cgroups, deepest first.
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
        for c in CONTROLLERS {
            remove_tree(&self.dir(c));
        }
    }
}

/// A v1 cpuset level without CPUs or memory nodes gets its parent's.
fn inherit_cpuset(dir: &Path) {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        if read(&dir.join(f)).trim().is_empty() {
            let up = read(&dir.parent().unwrap().join(f));
            write(&dir.join(f), up.trim());
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn write(path: &Path, value: &str) {
    std::fs::write(path, value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// usage less inactive file cache, in MB.
pub fn working_set_mb(dir: &Path) -> u64 {
    let usage: u64 = read(&dir.join("memory.usage_in_bytes"))
        .trim()
        .parse()
        .unwrap_or(0);
    let inactive: u64 = read(&dir.join("memory.stat"))
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    usage.saturating_sub(inactive) >> 20
}

/// Removes a cgroup tree: processes left in it are killed, directories
/// removed bottom-up (a cgroup directory goes with rmdir, its files too).
fn remove_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path());
        }
    }
    for pid in read(&dir.join("cgroup.procs")).split_whitespace() {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    for _ in 0..100 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A worker that burns one CPU.
pub const BUSY: &str = "print('ready', flush=True)\nwhile True: pass\n";

/// A worker that holds `mb` MB and sleeps.
pub fn holding(mb: u64) -> String {
    format!(
        "import time\nkept = [b'x' * (1 << 20) for _ in range({mb})]\nprint('ready', flush=True)\nwhile True: time.sleep(1)\n"
    )
}

/// A worker that grows by `step_mb` every `step_ms` up to `most_mb`, then
/// holds it.
pub fn growing(step_mb: u64, step_ms: u64, most_mb: u64) -> String {
    format!(
        "import time\nkept = []\nprint('ready', flush=True)\n\
         while len(kept) * {step_mb} < {most_mb}:\n    kept.append(b'x' * ({step_mb} << 20))\n    time.sleep({step_ms} / 1000)\n\
         while True: time.sleep(1)\n"
    )
}

/// `placement agent --colocation` for a test's parent, killed when dropped.
pub struct AgentProcess {
    pub child: Child,
    pub state_dir: PathBuf,
    log: PathBuf,
    /// Its flags beyond the test's own, kept for a restart.
    extra: Vec<String>,
    /// Handed to a restarted agent: its state directory stays.
    handed_over: bool,
}

impl AgentProcess {
    /// Starts the agent on the flat tree named `node` for `base`, with a
    /// fresh state directory and `extra` flags.
    pub fn start(base: &str, node: &str, cgroups: &TestCgroups, extra: &[&str]) -> AgentProcess {
        let state_dir =
            std::env::temp_dir().join(format!("agent-state-{node}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state_dir);
        Self::spawn(base, node, cgroups, state_dir, extra, 0)
    }

    /// Stops this agent and starts another on the same state directory.
    pub fn restart(&mut self, base: &str, node: &str, cgroups: &TestCgroups) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let next = Self::spawn(base, node, cgroups, self.state_dir.clone(), &extra, 1);
        let mut old = std::mem::replace(self, next);
        old.handed_over = true;
    }

    fn spawn(
        base: &str,
        node: &str,
        cgroups: &TestCgroups,
        state_dir: PathBuf,
        extra: &[&str],
        run: u32,
    ) -> AgentProcess {
        let log =
            std::env::temp_dir().join(format!("agent-{node}-{}-{run}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("the agent's log");
        let child = Command::new(crate::placement_bin())
            .args(["agent", "--colocation", "--tree-layout", "flat"])
            .args(["--provider-name", node, "--placement-url", base])
            .arg("--cgroup-parent")
            .arg(&cgroups.parent)
            .arg("--state-dir")
            .arg(&state_dir)
            .args(extra)
            .env("PLACEMENT_TOKEN", "admin")
            .env("RUST_LOG", "info")
            .env_remove("PLACEMENT_CONFIG_FILE")
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("the agent");
        AgentProcess {
            child,
            state_dir,
            log,
            extra: extra.iter().map(|e| e.to_string()).collect(),
            handed_over: false,
        }
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// A file of its state directory.
    pub fn state(&self, name: &str) -> String {
        read(&self.state_dir.join(name))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("agent log kept: {}\n{}", self.log.display(), self.log());
            return;
        }
        let _ = std::fs::remove_file(&self.log);
        if !self.handed_over {
            let _ = std::fs::remove_dir_all(&self.state_dir);
        }
    }
}
