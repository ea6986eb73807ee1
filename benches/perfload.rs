//! Placement's own CI performance job (openstack/placement
//! `gate/perfload-runner.sh`) against this service: `placeload` 0.3.0
//! creates 1,000 providers with inventory, aggregates and traits through
//! the API, then `ab -c 10 -n 500` asks for the same allocation candidates
//! (1,000 of them, about 450 KB of JSON) at `placement latest`. Quoted:
//! `ab`'s rate, p50 and p99, and the CPU each request cost the server and
//! PostgreSQL.
//!
//! `cargo bench --bench perfload`. Needs `ab` (Debian's apache2-utils);
//! `placeload` is installed once into a cached venv
//! (`${PERFLOAD_VENV:-~/.cache/placement-perfload/venv}`). Starts its own
//! PostgreSQL and one server with `--auth-strategy noauth2`, as the job
//! runs Placement. `BENCH_PERFLOAD_REPEATS` (3) runs of `ab`, each quoted.
//! Under `cargo test --benches` it is a smoke run: 20 providers, 20
//! requests, checked for errors.

use placement_testkit::cluster::free_port;
use placement_testkit::cpu::Clock;
use placement_testkit::{pg::PgCluster, placement_bin};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The job's first aggregate, which every provider placeload makes is in.
const AGGREGATE: &str = "14a5c8a3-5a99-4e8f-88be-00d85fcb1c17";

/// The job's query.
const QUERY: &str = "resources=VCPU:1,DISK_GB:10,MEMORY_MB:256\
    &member_of=14a5c8a3-5a99-4e8f-88be-00d85fcb1c17&required=HW_CPU_X86_AVX2";

/// A venv where `placeload` runs, made once.
fn placeload() -> PathBuf {
    let venv = std::env::var_os("PERFLOAD_VENV").map_or_else(
        || {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .expect("HOME or XDG_CACHE_HOME");
            cache.join("placement-perfload/venv")
        },
        PathBuf::from,
    );
    let bin = venv.join("bin/placeload");
    if !bin.exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
        run(Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "placeload==0.3.0",
        ]));
    }
    bin
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The server process, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(url: &str) -> Server {
    let port = free_port();
    let child = Command::new(placement_bin())
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--auth-strategy", "noauth2"])
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start placement serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}

/// What one `ab` run reported, and what it cost.
struct AbRun {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    server_ms: f64,
    postgres_ms: f64,
}

/// A number from the `ab` report line starting with `label`.
fn ab_field(report: &str, label: &str) -> f64 {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.trim_start()[label.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in ab's report:\n{report}"))
}

fn ab(url: &str, concurrency: u32, requests: u32) -> String {
    let report = run(Command::new("ab")
        .args([
            "-q",
            "-c",
            &concurrency.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args(["-H", "x-auth-token: admin"])
        .args(["-H", "openstack-api-version: placement latest"])
        .arg(url));
    assert_eq!(ab_field(&report, "Failed requests:"), 0.0, "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    report
}

fn measure(server: &Server, pg: &PgCluster, url: &str, requests: u32) -> AbRun {
    let clock = Clock::new();
    let pid = server.child.id();
    let (s0, p0) = (clock.own(pid), clock.postgres(pg.postmaster_pid()));
    let report = ab(url, 10, requests);
    let (s1, p1) = (clock.own(pid), clock.postgres(pg.postmaster_pid()));
    let per_request = |seconds: f64| seconds * 1e3 / f64::from(requests);
    AbRun {
        rate: ab_field(&report, "Requests per second:"),
        p50_ms: ab_field(&report, "50%"),
        p99_ms: ab_field(&report, "99%"),
        server_ms: per_request(s1 - s0),
        postgres_ms: per_request(p1 - p0),
    }
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let (providers, requests, repeats) = if measuring {
        let repeats = std::env::var("BENCH_PERFLOAD_REPEATS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3u32);
        (1_000u32, 500u32, repeats.max(1))
    } else {
        (20, 20, 1)
    };
    assert!(
        Command::new("ab").arg("-V").output().is_ok(),
        "ab is not installed: apt-get install apache2-utils"
    );
    let placeload = placeload();
    let pg = PgCluster::start();
    let server = start_server(&pg.url());
    let started = Instant::now();
    let loaded = run(Command::new(&placeload)
        .arg(&server.base)
        .arg(providers.to_string()));
    assert!(loaded.contains(AGGREGATE), "placeload: {loaded}");
    let failures = loaded.matches(['R', 'I', 'A', 'T', 'C']).count();
    assert_eq!(failures, 0, "placeload reported failures: {loaded}");
    println!(
        "placeload: {providers} providers in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let url = format!("{}/allocation_candidates?{QUERY}", server.base);
    // The job's warm-up.
    ab(&url, 1, 10);
    println!("ab -c 10 -n {requests}: req/s, p50, p99 (ms), CPU per request of the server and of PostgreSQL (ms)");
    for _ in 0..repeats {
        let r = measure(&server, &pg, &url, requests);
        println!(
            "  {:7.1} req/s  p50 {:4.0}  p99 {:4.0}  server {:.2}  postgres {:.2}",
            r.rate, r.p50_ms, r.p99_ms, r.server_ms, r.postgres_ms
        );
    }
}
