//! Admission rounds are kept for `--admission-round-retention` and pruned
//! after it by the server's housekeeping (which also runs at start).

use super::*;
use placement_testkit::{cluster, common};
use sqlx::Connection;

#[tokio::test]
async fn admission_rounds_past_their_retention_are_pruned() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    // The schema comes from a first start.
    drop(cluster::start_server_with(&url, "retention-schema", &[]).await);
    let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
    for (id, age_days) in [(uuid::Uuid::new_v4(), 8), (uuid::Uuid::new_v4(), 1)] {
        sqlx::query(
            "INSERT INTO admission_rounds (id, started_at, seed, request, result)
             VALUES ($1, now() - make_interval(days => $2), 1, '{}', '{}')",
        )
        .bind(id)
        .bind(age_days)
        .execute(&mut c)
        .await
        .expect("a round");
    }
    let server = cluster::start_server_with(
        &url,
        "retention",
        &["--admission-round-retention", &(7 * 86_400).to_string()],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM admission_rounds")
            .fetch_one(&mut c)
            .await
            .expect("count");
        if left == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} rounds left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let newest: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - started_at)::float8 / 86400 FROM admission_rounds",
    )
    .fetch_one(&mut c)
    .await
    .expect("age");
    assert!(newest < 2.0, "the day-old round stays");
    let _ = c.close().await;
    drop(server);
    common::drop_database(&admin_url, &db);
}
