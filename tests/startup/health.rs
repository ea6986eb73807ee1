//! A database that stops accepting connections: `/healthcheck` says so in
//! generic words (the database's own, which name it, go to the log), and
//! API requests get 503 `placement.database.unavailable`, never 500; both
//! recover once it accepts connections again.

use super::*;
use placement_testkit::{cluster, common};
use sqlx::{AssertSqlSafe, Connection};

async fn admin_sql(admin_url: &str, sql: &str) {
    let mut c = sqlx::PgConnection::connect(admin_url).await.expect("admin");
    sqlx::query(AssertSqlSafe(sql.to_string()))
        .execute(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = c.close().await;
}

#[tokio::test]
async fn a_database_refusing_connections_is_503_in_generic_words() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "health", &[]).await;
    let b = &server.base;
    let get = reqwest::Method::GET;
    let admin = [("x-auth-token", "admin")];
    assert_eq!(send(b, get.clone(), "/healthcheck", &[]).await.0, 200);
    admin_sql(
        &admin_url,
        &format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false"),
    )
    .await;
    admin_sql(
        &admin_url,
        &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"),
    )
    .await;
    for _ in 0..3 {
        let r = reqwest::Client::new()
            .get(format!("{b}/healthcheck"))
            .header("accept", "application/json")
            .send()
            .await
            .expect("healthcheck");
        assert_eq!(r.status(), 503);
        let text = r.text().await.expect("body");
        assert_eq!(
            text,
            r#"{"detailed":false,"reasons":["database unavailable"]}"#
        );
        let (status, _, body) = send(b, get.clone(), "/resource_providers", &admin).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["errors"][0]["code"], "placement.database.unavailable");
        assert!(!body.to_string().contains(&db), "{body}");
        // A search at rest too (its turn's failure answers every search
        // in the turn).
        let search = "/allocation_candidates?resources=VCPU:1";
        let (status, _, body) = send(b, get.clone(), search, &admin).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["errors"][0]["code"], "placement.database.unavailable");
        assert!(!body.to_string().contains(&db), "{body}");
    }
    assert!(
        server.log().contains("accepting connections"),
        "the detail is logged"
    );
    admin_sql(
        &admin_url,
        &format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while send(b, get.clone(), "/resource_providers", &admin).await.0 != 200 {
        assert!(Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(send(b, get, "/healthcheck", &[]).await.0, 200);
    drop(server);
    common::drop_database(&admin_url, &db);
}
