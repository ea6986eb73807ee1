//! The zero-config PostgreSQL is sealed from other local users: no TCP
//! listener, a socket directory nobody else may enter, a server that
//! inherits none of the service's environment, and a data directory
//! where the cluster's owner cannot plant a link for root to follow.
//! The other user is `nobody` (and `postgres` for the link), through
//! `runuser`, when the tests run as root; otherwise the modes are checked.

use super::database::zero_config_with;
use super::*;
use sqlx::{Connection, Row};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Runs `cmd` as `user` (through runuser); whether it succeeded, and its output.
fn as_user(user: &str, cmd: &[&str]) -> (bool, String) {
    let out = Command::new("runuser")
        .args(["-u", user, "--"])
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("runuser");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn psql() -> String {
    let mut bins: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL installed")
        .flatten()
        .map(|e| e.path().join("bin/psql"))
        .filter(|p| p.exists())
        .collect();
    bins.sort();
    bins.pop().expect("psql").display().to_string()
}

#[tokio::test]
async fn the_local_database_is_sealed_from_other_users() {
    let dir = std::env::temp_dir().join(format!(
        "pl-sealed-{}",
        &uuid::Uuid::new_v4().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    // A file root owns, and a link to it where the service writes its pid.
    let victim = std::env::temp_dir().join(format!("pl-victim-{}", uuid::Uuid::new_v4()));
    std::fs::write(&victim, "keep").expect("victim");
    std::os::unix::fs::symlink(&victim, dir.join("placement.pid")).expect("link");
    let secret = "hunter2-never-shown";
    let (server, _) = zero_config_with(&dir, &[("PLACEMENT_KEYSTONE_PASSWORD", secret)]).await;

    // The link was replaced, not followed.
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep");
    let pid_file = std::fs::symlink_metadata(dir.join("placement.pid")).expect("pid file");
    assert!(
        pid_file.file_type().is_file(),
        "placement.pid is a plain file"
    );

    // The service's user reaches the cluster through its socket only.
    let run = dir.join("run");
    let url = format!(
        "postgres://postgres@localhost/placement?host={}",
        run.display()
    );
    let mut c = sqlx::PgConnection::connect(&url)
        .await
        .expect("the owner connects");
    let listen: String = sqlx::query_scalar("SHOW listen_addresses")
        .fetch_one(&mut c)
        .await
        .expect("listen_addresses");
    assert_eq!(listen, "", "no TCP listener");
    // PostgreSQL's environment holds none of the service's.
    sqlx::query("CREATE TEMP TABLE e (line text)")
        .execute(&mut c)
        .await
        .expect("temp table");
    sqlx::query("COPY e FROM PROGRAM 'env'")
        .execute(&mut c)
        .await
        .expect("read the server's environment");
    let env: Vec<String> = sqlx::query("SELECT line FROM e")
        .fetch_all(&mut c)
        .await
        .expect("env")
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
    assert!(!env.iter().any(|l| l.contains(secret)), "{env:?}");
    assert!(!env.iter().any(|l| l.starts_with("PLACEMENT_")), "{env:?}");
    let _ = c.close().await;

    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(
        mode(&run),
        0o700,
        "the socket directory is its owner's alone"
    );
    assert_eq!(mode(&dir.join("pgdata")), 0o700);
    if is_root() {
        assert_eq!(
            std::fs::metadata(&dir).expect("meta").uid(),
            0,
            "root keeps the top level"
        );
        let sock = run.display().to_string();
        let (ok, out) = as_user(
            "nobody",
            &[
                &psql(),
                "-h",
                &sock,
                "-U",
                "postgres",
                "-d",
                "placement",
                "-c",
                "SELECT 1",
            ],
        );
        assert!(!ok, "nobody connected: {out}");
        let (ok, out) = as_user("nobody", &["ls", &sock]);
        assert!(!ok, "nobody listed the socket directory: {out}");
        // The cluster's owner cannot plant anything where root writes.
        let planted = dir.join("planted");
        let (ok, out) = as_user(
            "postgres",
            &[
                "ln",
                "-s",
                &victim.display().to_string(),
                &planted.display().to_string(),
            ],
        );
        assert!(
            !ok && !planted.exists(),
            "postgres wrote into the data directory: {out}"
        );
    } else {
        eprintln!("not root: the other-user checks need runuser; modes checked only");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&victim);
}

/// Issue 50, item 1: a data directory an older build left to `postgres`
/// holds a link that user planted at `log`; root takes the directory
/// back but neither follows nor hands over the link's target.
#[test]
fn root_does_not_follow_a_link_the_cluster_owner_planted() {
    if !is_root() {
        eprintln!("not root: nothing of root's to hand over");
        return;
    }
    let tag = &uuid::Uuid::new_v4().to_string()[..8];
    let dir = std::env::temp_dir().join(format!("pl-planted-{tag}"));
    let victim = std::env::temp_dir().join(format!("pl-victim-dir-{tag}"));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::create_dir_all(&victim).expect("victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).expect("mode");
    let (ok, out) = as_user("root", &["chown", "postgres", &dir.display().to_string()]);
    assert!(ok, "{out}");
    for sub in ["log", "run"] {
        let (ok, out) = as_user(
            "postgres",
            &[
                "ln",
                "-s",
                &victim.display().to_string(),
                &dir.join(sub).display().to_string(),
            ],
        );
        assert!(ok, "{out}");
    }
    let err = refused_start(&["--data-dir", &dir.display().to_string()]);
    assert!(
        err.contains("not by root") && err.contains(&victim.display().to_string()),
        "{err}"
    );
    let meta = std::fs::metadata(&victim).expect("victim");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.permissions().mode() & 0o777),
        (0, 0, 0o755),
        "root's directory was handed over"
    );
    assert_eq!(
        std::fs::metadata(&dir).expect("dir").uid(),
        0,
        "root took the data directory back"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&victim);
}
